//! What an install is missing before search works fully, each with the command that fixes it:
//! the desktop's status view shows this list, so the engine decides what is a problem.

use serde::Serialize;

use super::{default_embedding_model, fix_command, ModelListing, Models, RUNTIME_ID};

/// The ONNX Runtime library: where it was found, or what is wrong with it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct RuntimeStatus {
    /// Found and usable.
    pub ok: bool,
    /// Its path, or the error (which names the fix).
    pub detail: String,
}

/// A missing piece, with the command that fixes it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct SetupProblem {
    /// What is missing: `runtime` or `embedding_model`.
    pub component: String,
    /// What it costs the user.
    pub message: String,
    /// The command that fixes it.
    pub fix: String,
}

/// The runtime and the models, and what of them is missing.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct SetupReport {
    /// The ONNX Runtime library.
    pub runtime: RuntimeStatus,
    /// Every model installed or in the catalogue.
    pub models: Vec<ModelListing>,
    /// What is missing, each with its fix; empty when search works fully.
    pub problems: Vec<SetupProblem>,
}

impl Models {
    /// The runtime, the models, and what is missing of them.
    pub fn setup_report(&self) -> SetupReport {
        let runtime = match self.runtime_library() {
            Ok(path) => RuntimeStatus {
                ok: true,
                detail: path.display().to_string(),
            },
            Err(e) => RuntimeStatus {
                ok: false,
                detail: e.to_string(),
            },
        };
        let models = self.list();
        let problems = setup_problems(&runtime, &models);
        SetupReport {
            runtime,
            models,
            problems,
        }
    }
}

fn setup_problems(runtime: &RuntimeStatus, models: &[ModelListing]) -> Vec<SetupProblem> {
    let mut problems = Vec::new();
    if !runtime.ok {
        problems.push(SetupProblem {
            component: "runtime".into(),
            message: runtime.detail.clone(),
            fix: fix_command(RUNTIME_ID),
        });
    }
    let embedding_model = default_embedding_model();
    let installed = models
        .iter()
        .any(|m| m.id == embedding_model && m.installed_at.is_some());
    if !installed {
        problems.push(SetupProblem {
            component: "embedding_model".into(),
            message: format!(
                "The embedding model {embedding_model} is not installed, so vector and hybrid \
                 search fall back to keywords."
            ),
            fix: fix_command(embedding_model),
        });
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_runtime_and_embedding_model_are_reported_with_their_fixes() {
        let dir = tempfile::tempdir().unwrap();
        let models = Models::at(vec![dir.path().to_path_buf()]).list();
        assert!(models.iter().all(|m| m.installed_at.is_none()));
        let runtime = RuntimeStatus {
            ok: false,
            detail: "no ONNX Runtime library".into(),
        };
        let problems = setup_problems(&runtime, &models);
        let components: Vec<&str> = problems.iter().map(|p| p.component.as_str()).collect();
        assert_eq!(components, ["runtime", "embedding_model"]);
        assert_eq!(problems[0].message, "no ONNX Runtime library");
        assert_eq!(problems[0].fix, fix_command(RUNTIME_ID));
        assert_eq!(problems[1].fix, fix_command(default_embedding_model()));
        assert!(problems[1].message.contains(default_embedding_model()));
    }

    #[test]
    fn an_install_with_runtime_and_embedding_model_has_no_problems() {
        let dir = tempfile::tempdir().unwrap();
        let mut models = Models::at(vec![dir.path().to_path_buf()]).list();
        for m in models
            .iter_mut()
            .filter(|m| m.id == default_embedding_model())
        {
            m.installed_at = Some(dir.path().to_path_buf());
        }
        let runtime = RuntimeStatus {
            ok: true,
            detail: "/usr/lib/libonnxruntime.so".into(),
        };
        assert!(setup_problems(&runtime, &models).is_empty());
    }
}
