//! A model the user already has, copied in: a local folder (an ONNX file plus tokenizer
//! files) or a GGUF chat model, under an id no catalogue model claims.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::catalogue::{read_record, write_record, InstalledFile, InstalledModel, REQUIRED_FILES};
use super::install::{replace_dir, staging_dir};
use super::manifest::{manifest, ModelKind};
use super::verify::sha256_file;
use super::Models;
use crate::error::{Error, Result};

impl Models {
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
            served: None,
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
            served: None,
            dir: PathBuf::new(),
        };
        write_record(&staging, &model)?;
        let target = self.install_dir().join(&id);
        replace_dir(&staging, &target)?;
        read_record(&target)
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
pub(super) fn check_import_id(id: &str) -> std::result::Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
