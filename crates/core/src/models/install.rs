//! How models get here: pinned PyPI wheels (through `pip download`), the Hugging Face hub
//! (resumable downloads, with `HF_TOKEN` sent to the hub's own host only), or a local folder
//! or GGUF file imported; and their removal. Installs are staged and swapped into place.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::catalogue::{
    read_record, record_for, write_record, InstalledFile, InstalledModel, REQUIRED_FILES,
};
use super::manifest::{manifest, spec, FileSpec, ModelKind, ModelSpec, PackageSource};
use super::verify::{hex, sha256_file, verified};
use super::Models;
use crate::cancel::Cancel;
use crate::error::{Error, Result};

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

impl Models {
    /// Installs the ONNX Runtime library from its pinned PyPI wheel.
    pub fn fetch_runtime(&self) -> Result<PathBuf> {
        let runtime = &manifest().runtime;
        let target = self.install_dir().join(&runtime.install_dir);
        let staging = staging_dir(self.install_dir(), &runtime.install_dir)?;
        let registries = Registries::from_env();
        for source in &runtime.sources {
            install_from_wheel(source, &staging, &registries)?;
        }
        replace_dir(&staging, &target)?;
        Ok(target.join(&runtime.library))
    }

    /// Installs a catalogue model (from PyPI or the hub), replacing any earlier copy.
    pub fn fetch(&self, id: &str, on_progress: &dyn Fn(&FetchProgress)) -> Result<InstalledModel> {
        self.fetch_until(id, on_progress, &Cancel::new())
    }

    /// [`Models::fetch`], stopped when `cancel` is pressed: a hub download keeps what it has,
    /// and the next install resumes from there; nothing half-downloaded is ever used.
    pub fn fetch_until(
        &self,
        id: &str,
        on_progress: &dyn Fn(&FetchProgress),
        cancel: &Cancel,
    ) -> Result<InstalledModel> {
        self.fetch_from(id, &Registries::from_env(), on_progress, cancel)
    }

    /// [`Models::fetch`] with the hub endpoint and token given rather than read from the
    /// environment.
    fn fetch_from(
        &self,
        id: &str,
        registries: &Registries,
        on_progress: &dyn Fn(&FetchProgress),
        cancel: &Cancel,
    ) -> Result<InstalledModel> {
        let spec = spec(id).ok_or_else(|| Error::UnknownModel(id.to_string()))?;
        self.install(spec, registries, on_progress, cancel)
    }

    /// Installs `spec` into a staging folder, checks every file, and only then replaces any
    /// earlier copy: a failed install leaves the installed model as it was.
    fn install(
        &self,
        spec: &ModelSpec,
        registries: &Registries,
        on_progress: &dyn Fn(&FetchProgress),
        cancel: &Cancel,
    ) -> Result<InstalledModel> {
        let id = spec.id.as_str();
        let staging = staging_dir(self.install_dir(), id)?;
        let mut files = Vec::new();
        let origin;
        if let Some(hub) = &spec.hub {
            origin = format!("hub:{}@{}", hub.repo, hub.revision);
            for file in &spec.files {
                let url = format!(
                    "{}/{}/resolve/{}/{}",
                    registries.endpoint.trim_end_matches('/'),
                    hub.repo,
                    hub.revision,
                    file.from
                );
                files.push(download_file(
                    &url,
                    file,
                    &staging,
                    registries,
                    on_progress,
                    cancel,
                )?);
            }
        } else {
            origin = spec
                .sources
                .iter()
                .map(|s| format!("pypi:{}=={}", s.pypi, s.version))
                .collect::<Vec<_>>()
                .join(" + ");
            for source in &spec.sources {
                files.extend(install_from_wheel(source, &staging, registries)?);
            }
            if let Some(assemble) = &spec.assemble {
                files = super::assemble::join_parts(assemble, &staging, files)?;
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
/// usable folder name that no catalogue model and no device name claims.
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
    check_import_id(&id).map_err(invalid)?;
    Ok(id)
}

/// Longest id an import may take (a folder name on every platform).
const MAX_IMPORT_ID: usize = 128;

/// Windows device names: a folder called `con` or `nul.onnx` cannot be created or opened
/// there (the name reaches the device), whatever the case and extension.
const DEVICE_NAMES: &[&str] = &["con", "prn", "aux", "nul"];

/// Why `id` cannot name an imported model, if it cannot. An import under a catalogue id would
/// replace the sha256-pinned model in its folder, and everything that asks for that id (the
/// default chat model, a collection's embedder) would load the import instead (issue 38), so
/// catalogue ids (and the runtime's) are refused, in any case, since macOS and Windows
/// folders ignore case.
fn check_import_id(id: &str) -> std::result::Result<(), String> {
    let usable = !id.is_empty()
        && id.len() <= MAX_IMPORT_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !id.starts_with('.')
        // Windows drops a trailing dot: `qwen.` would be the folder `qwen`.
        && !id.ends_with('.');
    if !usable {
        return Err(format!(
            "`{id}` is not a usable id (1 to {MAX_IMPORT_ID} letters, digits, `-`, `_`, `.`, \
             not starting or ending with `.`)"
        ));
    }
    let lower = id.to_ascii_lowercase();
    if lower == super::RUNTIME_ID || lower == manifest().runtime.install_dir.to_ascii_lowercase() {
        return Err(format!(
            "`{id}` is where the ONNX Runtime library is installed; import under another id \
             (--id)"
        ));
    }
    if let Some(model) = manifest()
        .models
        .iter()
        .find(|m| m.id.eq_ignore_ascii_case(id))
    {
        return Err(format!(
            "`{id}` is the id of the catalogue model `{}`, which is pinned by sha256 and \
             installed with `quarry models fetch {}`; import under another id (--id)",
            model.id, model.id
        ));
    }
    let stem = lower.split('.').next().unwrap_or_default();
    let numbered = |prefix: &str| {
        stem.strip_prefix(prefix)
            .is_some_and(|n| n.len() == 1 && n.as_bytes()[0].is_ascii_digit())
    };
    if DEVICE_NAMES.contains(&stem) || numbered("com") || numbered("lpt") {
        return Err(format!(
            "`{id}` is a reserved device name on Windows (`{stem}`); import under another id \
             (--id)"
        ));
    }
    Ok(())
}

/// Where files come from: the hub and the credentials for it, and the package index pip
/// uses. Read from the environment once, where a fetch starts, and passed down (so tests give
/// their own without touching the process environment). No `Debug`: it holds a secret.
#[derive(Clone)]
struct Registries {
    /// `pip download --index-url`; `None` leaves pip to its own configuration (`PIP_INDEX_URL`,
    /// pip.conf), as a user who reaches PyPI through a mirror has set it.
    pip_index: Option<String>,
    /// Base URL: `QUARRY_HF_ENDPOINT`, else `HF_ENDPOINT`, else `https://huggingface.co`.
    endpoint: String,
    /// `HF_TOKEN` (for gated repositories), sent as `Authorization: Bearer …` to the
    /// endpoint's own scheme, host and port only.
    token: Option<String>,
}

impl Registries {
    fn from_env() -> Registries {
        Registries::from_vars(crate::environment::hub_variable)
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Registries {
        Registries {
            pip_index: None,
            endpoint: var("QUARRY_HF_ENDPOINT")
                .or_else(|| var("HF_ENDPOINT"))
                .unwrap_or_else(|| "https://huggingface.co".to_string()),
            token: var("HF_TOKEN")
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
        }
    }

    /// The token to send with a request for `url`: only when `url` is on the hub's own origin,
    /// never to another host (a CDN, a mirror, a redirect target).
    fn token_for(&self, url: &str) -> Option<&str> {
        let token = self.token.as_deref()?;
        same_origin(&self.endpoint, url).then_some(token)
    }
}

/// Whether two absolute URLs have the same scheme, host (case-insensitive) and port (the
/// scheme's default when none is written). Anything unparsable is not the same.
fn same_origin(a: &str, b: &str) -> bool {
    fn origin(url: &str) -> Option<(String, String, u16)> {
        let uri: ureq::http::Uri = url.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let host = uri.host()?.to_ascii_lowercase();
        let port = match (uri.port_u16(), scheme.as_str()) {
            (Some(port), _) => port,
            (None, "https") => 443,
            (None, "http") => 80,
            (None, _) => return None,
        };
        Some((scheme, host, port))
    }
    match (origin(a), origin(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
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

/// `pip download`s one pinned wheel and installs the listed files out of it.
fn install_from_wheel(
    source: &PackageSource,
    dest: &Path,
    registries: &Registries,
) -> Result<Vec<InstalledFile>> {
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
    if let Some(index) = &registries.pip_index {
        // Only this index: pip's configuration (extra indexes, find-links) is left out.
        args.extend(["--isolated".into(), "--index-url".into(), index.clone()]);
    }
    args.push(requirement.clone());
    let python = crate::environment::python().unwrap_or_else(|| "python3".into());
    let output = Command::new(&python)
        .args(&args)
        .output()
        .map_err(|e| Error::Download {
            url: format!("pypi:{requirement}"),
            reason: format!(
                "cannot run `{} -m pip` ({e}); install python3 and pip",
                python.display()
            ),
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
/// hash (`X-Linked-Etag`, the sha256 of an LFS file). `HF_TOKEN` goes with the request only
/// when `url` is on the hub's own host, and is dropped on any redirect.
fn download_file(
    url: &str,
    spec: &FileSpec,
    dest: &Path,
    registries: &Registries,
    on_progress: &dyn Fn(&FetchProgress),
    cancel: &Cancel,
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
    let have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    let response = request_from(url, have, registries).map_err(|e| fail(e.to_string()))?;
    let status = response.status().as_u16();
    let hub_sha = response_header(&response, "x-linked-etag")
        .or_else(|| response_header(&response, "etag"))
        .filter(|v| v.len() == 64 && v.chars().all(|c| c.is_ascii_hexdigit()));
    let (done, append) = resume_from(status, have).map_err(fail)?;
    let progress = |done: u64, total: Option<u64>| {
        on_progress(&FetchProgress {
            file: spec.path.clone(),
            done,
            total,
        })
    };
    let (done, total) = if status == 416 {
        (have, Some(have))
    } else {
        let length: Option<u64> =
            response_header(&response, "content-length").and_then(|v| v.parse().ok());
        let total = length.map(|l| l + done);
        let body = Body {
            part: &part,
            append,
            total,
            cancel,
        };
        let done = append_body(response, &body, done, &progress, &fail)?;
        (done, total)
    };
    if let Some(total) = total {
        if done < total {
            return Err(fail(format!(
                "connection closed after {done} of {total} bytes; run the same command again to resume"
            )));
        }
    }
    progress(done, total);
    place_checked(&part, dest, spec, hub_sha, &fail)
}

/// A GET of `url` from byte `have` on, with the hub's token when `url` is the hub's.
fn request_from(
    url: &str,
    have: u64,
    registries: &Registries,
) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_recv_body(Some(Duration::from_secs(60)))
        .http_status_as_error(false)
        // The hub sends LFS files from a CDN on another host: the token stays behind.
        .redirect_auth_headers(ureq::config::RedirectAuthHeaders::Never)
        .build()
        .into();
    let mut request = agent.get(url);
    if let Some(token) = registries.token_for(url) {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    if have > 0 {
        request = request.header("Range", format!("bytes={have}-"));
    }
    request.call()
}

/// A response header without quotes or a weak-validator prefix.
fn response_header(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
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
}

/// Where the body starts and whether it extends the part file, from the response status.
fn resume_from(status: u16, have: u64) -> std::result::Result<(u64, bool), String> {
    match status {
        206 => Ok((have, true)),
        200 => Ok((0, false)),
        416 if have > 0 => Ok((have, true)), // the part is already whole
        404 => Err("not found on the server (404)".into()),
        401 | 403 => Err(format!(
            "access denied ({status}); the repository may be gated: accept its licence on the hub and set HF_TOKEN"
        )),
        _ => Err(format!("server answered {status}")),
    }
}

/// Writes the body to the part file, reporting progress; returns the bytes the part holds.
/// Where a download's body goes, and what may stop it.
struct Body<'a> {
    /// The part file, kept between attempts.
    part: &'a Path,
    /// Whether the body continues the part (a resumed download).
    append: bool,
    /// The whole file's size, when the server said.
    total: Option<u64>,
    cancel: &'a Cancel,
}

fn append_body(
    response: ureq::http::Response<ureq::Body>,
    body_to: &Body<'_>,
    mut done: u64,
    progress: &dyn Fn(u64, Option<u64>),
    fail: &dyn Fn(String) -> Error,
) -> Result<u64> {
    let Body {
        part,
        append,
        total,
        cancel,
    } = *body_to;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(part)
        .map_err(|e| Error::io(part, e))?;
    let mut body = response.into_body().into_reader();
    let mut buf = vec![0u8; 1 << 16];
    let mut last_report = std::time::Instant::now();
    loop {
        if cancel.is_cancelled() {
            out.sync_all().map_err(|e| Error::io(part, e))?;
            return Err(fail(format!(
                "cancelled after {done} bytes; install it again to resume"
            )));
        }
        let n = body.read(&mut buf).map_err(|e| {
            fail(format!(
                "{e} after {done} bytes; run the same command again to resume"
            ))
        })?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| Error::io(part, e))?;
        done += n as u64;
        if last_report.elapsed() >= Duration::from_millis(200) {
            progress(done, total);
            last_report = std::time::Instant::now();
        }
    }
    out.sync_all().map_err(|e| Error::io(part, e))?;
    Ok(done)
}

/// Checks the whole part against the pinned or the hub's sha256 and moves it into place; a
/// mismatch discards it, so the next attempt starts over.
fn place_checked(
    part: &Path,
    dest: &Path,
    spec: &FileSpec,
    hub_sha: Option<String>,
    fail: &dyn Fn(String) -> Error,
) -> Result<InstalledFile> {
    let (sha256, bytes) = sha256_file(part)?;
    let expected = spec.sha256.clone().or(hub_sha);
    if let Some(expected) = expected {
        if !sha256.eq_ignore_ascii_case(&expected) {
            let _ = std::fs::remove_file(part);
            return Err(fail(format!(
                "checksum mismatch (sha256 {sha256}, expected {expected}); the partial file was discarded, run the command again"
            )));
        }
    }
    let to = dest.join(&spec.path);
    std::fs::rename(part, &to).map_err(|e| Error::io(&to, e))?;
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
#[path = "../../tests/common/http.rs"]
mod test_http;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each request a loopback server saw: its path and its `Authorization` header.
    type SeenRequests = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

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

    /// Issue 38: `models import --id <a catalogue id>` replaced the sha256-pinned model, and
    /// chat loaded the import; device names made folders Windows cannot open.
    #[test]
    fn imports_refuse_catalogue_ids_and_reserved_names() {
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().join("models")]);
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        let gguf = dir.path().join("mine.gguf");
        std::fs::write(&gguf, b"GGUF\x03\x00\x00\x00 header only").unwrap();
        let chat = crate::models::default_llm_model();
        for id in [chat.to_string(), chat.to_uppercase()] {
            let err = models.import(&gguf, Some(&id), ModelKind::Llm).unwrap_err();
            assert_eq!(err.code(), "invalid_model");
            let message = err.to_string();
            assert!(message.contains(&format!("`{id}`")), "{message}");
            assert!(message.contains("catalogue model"), "{message}");
            assert!(
                message.contains(&format!("quarry models fetch {chat}")),
                "{message}"
            );
        }
        assert!(
            !models.install_dir().join(chat).exists(),
            "nothing was installed under the catalogue id"
        );
        let embedder = crate::models::default_embedding_model();
        let folder = dir.path().join(embedder);
        std::fs::create_dir_all(&folder).unwrap();
        // Named by the folder, as `quarry models import DIR` without --id names it.
        let err = models
            .import(&folder, None, ModelKind::Embedding)
            .unwrap_err();
        assert!(err.to_string().contains("catalogue model"), "{err}");
        let err = models
            .import(&gguf, Some(crate::models::RUNTIME_ID), ModelKind::Llm)
            .unwrap_err();
        assert!(err.to_string().contains("ONNX Runtime"), "{err}");

        for id in [
            "con",
            "CON",
            "prn",
            "aux",
            "Nul",
            "nul.gguf",
            "com1",
            "COM9",
            "com0",
            "lpt1",
            "LPT9.onnx",
            "con.tar.gz",
        ] {
            let err = models.import(&gguf, Some(id), ModelKind::Llm).unwrap_err();
            assert!(
                err.to_string().contains("reserved device name"),
                "{id}: {err}"
            );
        }
        // The name alone, from the file: `NUL.gguf` would install as `nul`.
        let nul = dir.path().join("NUL.gguf");
        std::fs::copy(&gguf, &nul).unwrap();
        let err = models.import(&nul, None, ModelKind::Llm).unwrap_err();
        assert!(err.to_string().contains("reserved device name"), "{err}");
        let long = "a".repeat(MAX_IMPORT_ID + 1);
        for id in [
            "",
            ".",
            "..",
            "a/b",
            "a\\b",
            "../up",
            "x.",
            ".hidden",
            "a b",
            long.as_str(),
        ] {
            let err = models.import(&gguf, Some(id), ModelKind::Llm).unwrap_err();
            assert!(err.to_string().contains("not a usable id"), "{id:?}: {err}");
        }
        // Names that only look alike are fine.
        for id in ["console", "com10", "lpt", "nully", "my-chat.v2"] {
            let model = models.import(&gguf, Some(id), ModelKind::Llm).unwrap();
            assert_eq!(model.id, id);
        }
    }

    /// A folder imported under a catalogue id before imports refused them is not loaded as
    /// that model; the error says how to put the pinned model back.
    #[test]
    fn an_import_already_under_a_catalogue_id_is_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().join("models")]);
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        let gguf = dir.path().join("mine.gguf");
        std::fs::write(&gguf, b"GGUF\x03\x00\x00\x00 header only").unwrap();
        let imported = models
            .import(&gguf, Some("stand-in"), ModelKind::Llm)
            .unwrap();
        let chat = crate::models::default_llm_model();
        let shadow = models.install_dir().join(chat);
        std::fs::rename(&imported.dir, &shadow).unwrap();
        let err = models.find(chat).unwrap_err();
        assert_eq!(err.code(), "model_file_bad");
        let message = err.to_string();
        assert!(message.contains("import:"), "{message}");
        assert!(
            message.contains(&format!("quarry models fetch {chat}")),
            "{message}"
        );
        assert!(models.find_kind(chat, ModelKind::Llm).is_err());
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

    /// A loopback server that records each request's path and `Authorization` header. Paths
    /// starting `/moved` answer a redirect to `redirect_to` plus the rest of the path; others
    /// answer 200 with the path as the body.
    struct Recorder {
        url: String,
        seen: SeenRequests,
    }

    fn recorder(redirect_to: Option<String>) -> Recorder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = test_http::read_request(&stream) else {
                    continue;
                };
                let path = request.path.clone();
                let authorization = request.header("authorization").map(String::from);
                log.lock().unwrap().push((path.clone(), authorization));
                let reply = match (path.strip_prefix("/moved"), &redirect_to) {
                    (Some(rest), Some(to)) => format!(
                        "HTTP/1.1 302 Found\r\nLocation: {to}{rest}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    ),
                    _ => format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{path}",
                        path.len()
                    ),
                };
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        Recorder { url, seen }
    }

    fn seen(server: &Recorder) -> Vec<(String, Option<String>)> {
        server.seen.lock().unwrap().clone()
    }

    #[test]
    fn hub_settings_come_from_the_environment_and_the_token_only_suits_the_hub_origin() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let hub = Registries::from_vars(vars(&[]));
        assert_eq!(hub.endpoint, "https://huggingface.co");
        assert!(hub.token.is_none());
        let hub = Registries::from_vars(vars(&[
            ("HF_ENDPOINT", "https://mirror.example"),
            ("HF_TOKEN", "  "),
        ]));
        assert_eq!(hub.endpoint, "https://mirror.example");
        assert!(hub.token.is_none(), "a blank token is no token");
        let hub = Registries::from_vars(vars(&[
            ("QUARRY_HF_ENDPOINT", "https://HuggingFace.co/"),
            ("HF_ENDPOINT", "https://mirror.example"),
            ("HF_TOKEN", "hf_secret\n"),
        ]));
        assert_eq!(hub.endpoint, "https://HuggingFace.co/");
        assert_eq!(hub.token.as_deref(), Some("hf_secret"));
        let on_hub = "https://huggingface.co/Xenova/m/resolve/main/onnx/model.onnx";
        assert_eq!(hub.token_for(on_hub), Some("hf_secret"));
        assert_eq!(
            hub.token_for("https://huggingface.co:443/x"),
            Some("hf_secret")
        );
        for elsewhere in [
            "https://cdn-lfs.huggingface.co/x",
            "https://huggingface.co.evil.example/x",
            "https://evil.example/huggingface.co/x",
            "http://huggingface.co/x",
            "https://huggingface.co:8443/x",
            "https://huggingface.co@evil.example/x",
            "not a url",
        ] {
            assert_eq!(hub.token_for(elsewhere), None, "{elsewhere}");
        }
    }

    #[test]
    fn hub_fetches_send_hf_token_and_other_hosts_never_get_it() {
        let other = recorder(None);
        let hub = recorder(Some(format!("{}/cdn", other.url)));
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().join("models")]);
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        let access = Registries {
            pip_index: None,
            endpoint: hub.url.clone(),
            token: Some("hf_test_token".into()),
        };

        // A catalogue model from the hub: every file request carries the token.
        let model = models
            .fetch_from("ms-marco-minilm-l6-v2", &access, &|_| {}, &Cancel::new())
            .unwrap();
        assert_eq!(model.origin, "hub:Xenova/ms-marco-MiniLM-L-6-v2@main");
        let requests = seen(&hub);
        assert_eq!(
            requests.len(),
            spec("ms-marco-minilm-l6-v2").unwrap().files.len()
        );
        for (path, auth) in &requests {
            assert!(
                path.starts_with("/Xenova/ms-marco-MiniLM-L-6-v2/resolve/main/"),
                "{path}"
            );
            assert_eq!(auth.as_deref(), Some("Bearer hf_test_token"), "{path}");
        }
        assert_eq!(
            std::fs::read_to_string(model.file("model.onnx")).unwrap(),
            "/Xenova/ms-marco-MiniLM-L-6-v2/resolve/main/onnx/model.onnx"
        );

        // Without a token nothing is sent.
        let no_token = Registries {
            pip_index: None,
            endpoint: hub.url.clone(),
            token: None,
        };
        models
            .fetch_from("ms-marco-minilm-l6-v2", &no_token, &|_| {}, &Cancel::new())
            .unwrap();
        assert!(seen(&hub)[requests.len()..]
            .iter()
            .all(|(_, a)| a.is_none()));

        let spec = FileSpec {
            path: "file.bin".into(),
            from: "file.bin".into(),
            sha256: None,
        };
        let staging = dir.path().join("models/.staging-test");
        std::fs::create_dir_all(&staging).unwrap();

        // A URL on another host (here another port) gets no token…
        let url = format!("{}/direct/file.bin", other.url);
        download_file(&url, &spec, &staging, &access, &|_| {}, &Cancel::new()).unwrap();
        assert_eq!(seen(&other), vec![("/direct/file.bin".to_string(), None)]);

        // …nor does a redirect from the hub to another host, though the hub itself gets it.
        let before = seen(&hub).len();
        let url = format!("{}/moved/file.bin", hub.url);
        download_file(&url, &spec, &staging, &access, &|_| {}, &Cancel::new()).unwrap();
        assert_eq!(
            seen(&hub)[before..],
            [(
                "/moved/file.bin".to_string(),
                Some("Bearer hf_test_token".to_string())
            )]
        );
        assert_eq!(seen(&other)[1..], [("/cdn/file.bin".to_string(), None)]);
        assert_eq!(
            std::fs::read_to_string(staging.join("file.bin")).unwrap(),
            "/cdn/file.bin"
        );
    }

    /// A wheel as a package index serves it: the files, and the metadata pip reads.
    fn wheel(name: &str, version: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
        use zip::write::SimpleFileOptions;
        let mut out = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut out);
        let dist = format!("{}-{version}.dist-info", name.replace('-', "_"));
        let metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
        let wheel = "Wheel-Version: 1.0\nGenerator: quarry-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n";
        let mut all: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|(path, bytes)| (path.to_string(), bytes.to_vec()))
            .collect();
        all.push((format!("{dist}/METADATA"), metadata.into_bytes()));
        all.push((format!("{dist}/WHEEL"), wheel.as_bytes().to_vec()));
        let record: String = all.iter().map(|(p, _)| format!("{p},,\n")).collect();
        all.push((
            format!("{dist}/RECORD"),
            (record + &format!("{dist}/RECORD,,\n")).into_bytes(),
        ));
        for (path, bytes) in all {
            zip.start_file(path, SimpleFileOptions::default()).unwrap();
            zip.write_all(&bytes).unwrap();
        }
        zip.finish().unwrap();
        out.into_inner()
    }

    /// A loopback PEP 503 index of `wheels` (file name → bytes) for `project`s.
    fn package_index(wheels: Vec<(String, String, Vec<u8>)>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/simple", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = test_http::read_request(&stream) else {
                    continue;
                };
                let path = request.path.trim_end_matches('/').to_string();
                let page = wheels.iter().find_map(|(project, file, bytes)| {
                    if path == format!("/simple/{project}") {
                        let link = format!(
                            "<!DOCTYPE html><html><body><a href=\"/files/{file}#sha256={}\">{file}</a></body></html>",
                            hex(&Sha256::digest(bytes))
                        );
                        Some(("text/html", link.into_bytes()))
                    } else if path == format!("/files/{file}") {
                        Some(("application/octet-stream", bytes.clone()))
                    } else {
                        None
                    }
                });
                let (status, kind, body) = match page {
                    Some((kind, body)) => ("200 OK", kind, body),
                    None => ("404 Not Found", "text/plain", b"not here".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        url
    }

    #[test]
    fn a_model_in_parts_installs_from_a_package_index_joined_and_checked() {
        let mut whole = crate::models::gguf::tests::header(&[("general.architecture", "qwen2")]);
        whole.extend((0..6000u32).map(|i| (i % 251) as u8));
        let pieces: Vec<&[u8]> = whole.chunks(whole.len().div_ceil(3)).collect();
        let wheels: Vec<(String, String, Vec<u8>)> = pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| {
                let project = format!("tiny-parts-part{}", i + 1);
                let file = format!("tiny_parts_part{}-0.9.0-py3-none-any.whl", i + 1);
                let inside = format!("tiny_parts/part{}.bin", i + 1);
                (
                    project.clone(),
                    file,
                    wheel(&project, "0.9.0", &[(&inside, piece)]),
                )
            })
            .collect();
        let catalogue_entry = |pinned_wheels: &[(String, String, Vec<u8>)]| -> ModelSpec {
            let sources: Vec<serde_json::Value> = pinned_wheels
                .iter()
                .zip(&pieces)
                .enumerate()
                .map(|(i, ((project, file, bytes), piece))| {
                    serde_json::json!({
                        "pypi": project, "version": "0.9.0", "wheel": file,
                        "wheel_sha256": hex(&Sha256::digest(bytes)),
                        "files": [{"path": format!("part{}.bin", i + 1),
                                   "from": format!("tiny_parts/part{}.bin", i + 1),
                                   "sha256": hex(&Sha256::digest(piece))}]
                    })
                })
                .collect();
            serde_json::from_value(serde_json::json!({
                "id": "tiny-parts", "kind": "llm", "description": "a test model in three parts",
                "max_tokens": 512, "license": "Apache-2.0", "sources": sources,
                "provenance": "three test packages",
                "assemble": {"path": "model.gguf", "parts": ["part1.bin", "part2.bin", "part3.bin"],
                             "bytes": whole.len(), "sha256": hex(&Sha256::digest(&whole)),
                             "gguf": {"general.architecture": "qwen2"}}
            }))
            .unwrap()
        };
        let registries = Registries {
            pip_index: Some(package_index(wheels.clone())),
            endpoint: "http://127.0.0.1:9".into(),
            token: None,
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("models")).unwrap();
        let models = Models::at(vec![dir.path().join("models")]);

        let model = models
            .install(
                &catalogue_entry(&wheels),
                &registries,
                &|_| {},
                &Cancel::new(),
            )
            .unwrap();
        assert_eq!(std::fs::read(model.file("model.gguf")).unwrap(), whole);
        assert_eq!(
            model.origin,
            "pypi:tiny-parts-part1==0.9.0 + pypi:tiny-parts-part2==0.9.0 + pypi:tiny-parts-part3==0.9.0"
        );
        let left: Vec<String> = std::fs::read_dir(&model.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("part"))
            .collect();
        assert!(left.is_empty(), "the parts are joined and gone: {left:?}");

        // A part that is not the pinned wheel is refused by name, and the install already
        // there stays as it was.
        let mut tampered = wheels.clone();
        tampered[1].2 = wheel(
            &tampered[1].0,
            "0.9.0",
            &[("tiny_parts/part2.bin", b"other")],
        );
        let registries = Registries {
            pip_index: Some(package_index(tampered)),
            ..registries
        };
        let err = models
            .install(
                &catalogue_entry(&wheels),
                &registries,
                &|_| {},
                &Cancel::new(),
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tiny-parts-part2==0.9.0") && err.contains("does not match the pinned"),
            "{err}"
        );
        assert_eq!(std::fs::read(model.file("model.gguf")).unwrap(), whole);
    }
}
