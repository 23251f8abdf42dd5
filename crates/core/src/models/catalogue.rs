//! What is installed and what is known: the record kept in every model folder, the lookups
//! over the search path, and the listing of the catalogue beside what is installed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::manifest::{manifest, spec, ModelKind, ModelSpec};
use super::verify::check_file;
use super::{fix_command, Models};
use crate::error::{Error, Result};

/// The record file inside every installed model folder.
pub const RECORD_FILE: &str = "quarry-model.json";
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
    /// Every file with its checksum (none for a served model).
    pub files: Vec<InstalledFile>,
    /// Where the server of a served model is (`quarry models serve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<super::ServedModel>,
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
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ModelListing {
    /// Id.
    pub id: String,
    /// Embedding or reranker.
    pub kind: ModelKind,
    /// Installed here (folder), if it is.
    #[serde(serialize_with = "crate::serde_paths::opt_path")]
    #[cfg_attr(feature = "specta", specta(type = Option<String>))]
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
    /// Where the weights come from when that is not their own publisher.
    pub provenance: Option<String>,
}

impl Models {
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
        let model = self.locate(id)?;
        // A folder imported under a catalogue id (before imports refused them, or placed by
        // hand) would stand in for the pinned model everywhere that id is asked for.
        if spec(id).is_some() && model.origin.starts_with("import:") {
            return Err(Error::ModelFileBad {
                path: model.dir.join(RECORD_FILE),
                problem: format!(
                    "the record of an import ({}), not of the catalogue model `{id}` pinned by sha256",
                    model.origin
                ),
                fix: fix_command(id),
            });
        }
        Ok(model)
    }

    /// The installed folder for `id` as its record describes it, whatever it holds.
    fn locate(&self, id: &str) -> Result<InstalledModel> {
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
                provenance: m.provenance.clone(),
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
                    provenance: None,
                });
            }
        }
        rows
    }
}

pub(super) fn record_for(
    spec: &ModelSpec,
    origin: String,
    files: Vec<InstalledFile>,
) -> InstalledModel {
    InstalledModel {
        id: spec.id.clone(),
        kind: spec.kind,
        dimension: spec.dimension,
        pooling: spec.pooling.clone(),
        max_tokens: spec.max_tokens,
        origin,
        files,
        served: None,
        dir: PathBuf::new(),
    }
}

pub(super) fn read_record(dir: &Path) -> Result<InstalledModel> {
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

pub(super) fn write_record(dir: &Path, model: &InstalledModel) -> Result<()> {
    let path = dir.join(RECORD_FILE);
    let json = serde_json::to_vec_pretty(model).map_err(|e| Error::Internal(e.to_string()))?;
    std::fs::write(&path, json).map_err(|e| Error::io(&path, e))
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
}
