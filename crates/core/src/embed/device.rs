//! Where embedding models run. ONNX Runtime's CUDA execution provider runs them on an NVIDIA
//! GPU when the loaded runtime has one: the `onnxruntime-cuda` runtime (`quarry models fetch
//! onnxruntime-cuda`: the `onnxruntime-gpu` wheel and NVIDIA's CUDA and cuDNN wheels, pinned
//! like the CPU runtime), or any library `ORT_DYLIB_PATH` names. Otherwise, or when the GPU
//! cannot be used (no driver, no device, a library missing), they run on the CPU as before, and
//! the placement says why.
//!
//! `QUARRY_EMBED_DEVICE` decides: `auto` (the default: the GPU when it works, else the CPU),
//! `cpu`, or `cuda` / `cuda:N` (that GPU or an error naming the variable: asked for, it is
//! not silently replaced).

use std::path::Path;
use std::sync::Mutex;

use ort::ep::{ExecutionProvider, ExecutionProviderDispatch, CUDA};
use serde::Serialize;

use crate::environment::EMBED_DEVICE;
use crate::models::CUDA_RUNTIME_ID;
use crate::{Error, Result};

/// The CPU's label where a device's stands.
pub const CPU: &str = "CPU";

/// Which device the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The GPU when the runtime has CUDA and it works, else the CPU.
    Auto,
    /// The CPU, even with a GPU there.
    Cpu,
    /// This CUDA device, or an error.
    Cuda(i32),
}

impl Request {
    /// `auto`, `cpu`, `cuda` or `cuda:N` (any case).
    pub fn parse(value: &str) -> Result<Request> {
        let value = value.trim().to_ascii_lowercase();
        let bad = || Error::InvalidSetting {
            field: EMBED_DEVICE.into(),
            reason: format!("`{value}` is not `auto`, `cpu`, `cuda` or `cuda:N` (a device number)"),
        };
        match value.as_str() {
            "" | "auto" => Ok(Request::Auto),
            // As `environment::embed_device_is_cpu` reads it (the runtime's choice).
            "cpu" => Ok(Request::Cpu),
            "cuda" => Ok(Request::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<i32>().ok())
                .filter(|n| *n >= 0)
                .map(Request::Cuda)
                .ok_or_else(bad),
        }
    }

    /// From `QUARRY_EMBED_DEVICE`; `auto` when it is not set.
    pub fn from_env() -> Result<Request> {
        crate::environment::embed_device().map_or(Ok(Request::Auto), |v| Request::parse(&v))
    }
}

/// Where a model's sessions run, and why there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct EmbedPlacement {
    /// The device, as every view names it: `CPU` or `CUDA 0`.
    pub device: String,
    /// Why there, in words.
    pub why: String,
}

impl EmbedPlacement {
    fn cpu(why: impl Into<String>) -> EmbedPlacement {
        EmbedPlacement {
            device: CPU.into(),
            why: why.into(),
        }
    }

    fn cuda(device: i32, why: impl Into<String>) -> EmbedPlacement {
        EmbedPlacement {
            device: format!("CUDA {device}"),
            why: why.into(),
        }
    }

    /// `CUDA 0` or `CPU`.
    pub fn label(&self) -> String {
        self.device.clone()
    }
}

/// Why the GPU was given up in this process, once it failed under `auto`: later sessions go
/// straight to the CPU instead of failing the same way again.
static GPU_FAILED: Mutex<Option<String>> = Mutex::new(None);

/// Makes a model's session with `make` on the device `request` asks for: first with the CUDA
/// execution provider where the runtime at `runtime` has it and `request` allows it, then, if
/// that fails under `auto`, on the CPU. `make` is given the execution providers to register
/// (none: the CPU) and whether the graph must suit another device than the CPU (the CPU's
/// optimised copy would not).
pub(crate) fn make_on_device<T>(
    request: Request,
    runtime: &Path,
    mut make: impl FnMut(Vec<ExecutionProviderDispatch>, bool) -> Result<T>,
) -> Result<(T, EmbedPlacement)> {
    let cuda = match gpu_to_try(request, runtime)? {
        Ok(device) => device,
        Err(cpu) => return Ok((make(Vec::new(), false)?, cpu)),
    };
    preload_cuda_libraries(runtime);
    let provider = CUDA::default()
        .with_device_id(cuda)
        .build()
        .error_on_failure();
    match make(vec![provider], true) {
        Ok(session) => Ok((
            session,
            EmbedPlacement::cuda(
                cuda,
                match request {
                    Request::Cuda(_) => format!("{EMBED_DEVICE}=cuda:{cuda}"),
                    _ => "ONNX Runtime's CUDA execution provider".into(),
                },
            ),
        )),
        Err(e) if request == Request::Auto => {
            let why = format!("the GPU could not be used: {e}");
            tracing::warn!("embedding on the CPU: {why}");
            *GPU_FAILED.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
            Ok((make(Vec::new(), false)?, EmbedPlacement::cpu(why)))
        }
        Err(e) => Err(Error::InvalidSetting {
            field: EMBED_DEVICE.into(),
            reason: format!("CUDA device {cuda} cannot run the model: {e}"),
        }),
    }
}

/// The CUDA device to try, or the CPU's placement when there is none to try; an error when
/// CUDA is asked for and the runtime has none.
fn gpu_to_try(
    request: Request,
    runtime: &Path,
) -> Result<std::result::Result<i32, EmbedPlacement>> {
    let device = match request {
        Request::Cpu => return Ok(Err(EmbedPlacement::cpu(format!("{EMBED_DEVICE}=cpu")))),
        Request::Auto => 0,
        Request::Cuda(n) => n,
    };
    if !CUDA::is_available().unwrap_or(false) {
        let why = format!(
            "the ONNX Runtime at `{}` has no CUDA execution provider (`quarry models fetch {CUDA_RUNTIME_ID}` installs one)",
            runtime.display()
        );
        return match request {
            Request::Auto => Ok(Err(EmbedPlacement::cpu(why))),
            _ => Err(Error::InvalidSetting {
                field: EMBED_DEVICE.into(),
                reason: why,
            }),
        };
    }
    if request == Request::Auto {
        if let Some(why) = GPU_FAILED.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(Err(EmbedPlacement::cpu(why)));
        }
    }
    Ok(Ok(device))
}

/// Where an embedding model would run now, without loading one: the CPU, or the CUDA device
/// the runtime offers (the CPU still, should the GPU fail when a model loads). An error when
/// the setting is wrong or CUDA is asked for and the runtime has none.
pub fn expected(models: &crate::models::Models) -> Result<EmbedPlacement> {
    let request = Request::from_env()?;
    if request == Request::Cpu {
        return Ok(EmbedPlacement::cpu(format!("{EMBED_DEVICE}=cpu")));
    }
    let runtime = models.runtime_library()?;
    super::runtime::environment(&runtime)?;
    Ok(match gpu_to_try(request, &runtime)? {
        Ok(device) => EmbedPlacement::cuda(
            device,
            "ONNX Runtime's CUDA execution provider (the CPU if the GPU cannot be used)",
        ),
        Err(cpu) => cpu,
    })
}

/// NVIDIA's libraries the CUDA execution provider links to, in the order they depend on each
/// other (ONNX Runtime's own list, cuDNN's engines last).
const CUDA_LIBRARIES: &[&str] = &[
    "libcudart.so.13",
    "libcublasLt.so.13",
    "libcublas.so.13",
    "libnvrtc.so.13",
    "libcurand.so.10",
    "libcufft.so.12",
    "libcudnn.so.9",
    "libcudnn_graph.so.9",
    "libcudnn_ops.so.9",
    "libcudnn_heuristic.so.9",
    "libcudnn_adv.so.9",
    "libcudnn_cnn.so.9",
    "libcudnn_engines_precompiled.so.9",
    "libcudnn_engines_runtime_compiled.so.9",
    "libcudnn_engines_tensor_ir.so.9",
];

/// Loads the CUDA libraries installed beside the runtime (the `onnxruntime-cuda` runtime
/// carries them), so the execution provider, which has no search path of its own, finds them
/// by name; a machine's own CUDA install on the library path serves where they are absent.
/// Once per process.
fn preload_cuda_libraries(runtime: &Path) {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let Some(dir) = runtime.parent() else { return };
        for name in CUDA_LIBRARIES {
            let path = dir.join(name);
            if path.is_file() {
                if let Err(e) = ort::util::preload_dylib(&path) {
                    tracing::warn!("cannot load {}: {e}", path.display());
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_setting_parses_and_names_itself_when_wrong() {
        assert_eq!(Request::parse("").unwrap(), Request::Auto);
        assert_eq!(Request::parse(" AUTO ").unwrap(), Request::Auto);
        assert_eq!(Request::parse("cpu").unwrap(), Request::Cpu);
        assert_eq!(Request::parse("cuda").unwrap(), Request::Cuda(0));
        assert_eq!(Request::parse("CUDA:1").unwrap(), Request::Cuda(1));
        for bad in ["vulkan0", "gpu", "cuda:", "cuda:-1", "cuda:x"] {
            let e = Request::parse(bad).unwrap_err().to_string();
            assert!(e.contains(EMBED_DEVICE), "{e}");
            assert!(e.contains("cuda:N"), "{e}");
        }
    }

    #[test]
    fn labels_say_the_device() {
        assert_eq!(EmbedPlacement::cpu("x").label(), "CPU");
        assert_eq!(EmbedPlacement::cuda(1, "x").label(), "CUDA 1");
    }
}
