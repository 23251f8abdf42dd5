//! Where a chat model runs. Built with the `vulkan` feature, llama.cpp offloads a model to any
//! GPU its Vulkan backend sees (NVIDIA, AMD and Intel cards, integrated ones too); without one,
//! or when the one there cannot take the model, the model runs on the CPU as before.
//! `QUARRY_LLM_DEVICE` decides: `auto` (the default: the first GPU with room for the model),
//! `cpu`, or a device by the name llama.cpp gives it (`Vulkan0`).
//!
//! Vulkan drivers that run on the CPU (Mesa's lavapipe) are not offered unless named in
//! `GGML_VK_VISIBLE_DEVICES` (llama.cpp's own variable): the tests do that, so the Vulkan path
//! runs on a machine without a GPU.

use llama_cpp_2::LlamaBackendDeviceType;
use serde::Serialize;

use super::embedded::MODEL_FILE;
use crate::models::{ModelKind, Models};
use crate::{Error, Result};

/// The environment variable that picks the device.
pub const DEVICE_ENV: &str = crate::environment::LLM_DEVICE;

/// How the CPU is named where a device's label stands ([`Placement::label`], measured speeds).
pub const CPU: &str = "CPU";

/// Free memory a model needs beyond its file: the KV cache of a 4,096-token context and the
/// compute buffers (about 330 MiB for the 1.5B model).
const HEADROOM_BYTES: u64 = 512 << 20;

/// A device llama.cpp can offload a model to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Accelerator {
    /// llama.cpp's index of the device.
    #[serde(skip)]
    pub index: usize,
    /// llama.cpp's name for it (`Vulkan0`).
    pub name: String,
    /// What the driver calls it (`NVIDIA GeForce RTX 4070`).
    pub description: String,
    /// Its memory in bytes.
    pub memory_total: u64,
    /// How much of it is free, in bytes.
    pub memory_free: u64,
}

/// Which device the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preference {
    /// The first GPU with room for the model, else the CPU.
    Auto,
    /// The CPU, even with a GPU there.
    Cpu,
    /// A device by name; an error when there is none by that name.
    Named(String),
}

impl Preference {
    /// `auto`, `cpu` (any case) or a device's name.
    pub fn parse(value: &str) -> Preference {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Preference::Auto,
            "cpu" => Preference::Cpu,
            _ => Preference::Named(value.trim().to_string()),
        }
    }

    /// From [`DEVICE_ENV`]; `auto` when it is not set.
    pub fn from_env() -> Preference {
        crate::environment::llm_device().map_or(Preference::Auto, |v| Preference::parse(&v))
    }
}

/// Where a model is loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Placement {
    /// The GPU; `None`: the CPU.
    pub device: Option<Accelerator>,
    /// Why there, in words.
    pub why: String,
}

impl Placement {
    /// On the CPU, for `why`.
    pub fn cpu(why: impl Into<String>) -> Placement {
        Placement {
            device: None,
            why: why.into(),
        }
    }

    /// The device in a few words: `Vulkan0 (NVIDIA GeForce RTX 4070)` or `CPU`.
    pub fn label(&self) -> String {
        match &self.device {
            Some(d) => format!("{} ({})", d.name, d.description),
            None => CPU.into(),
        }
    }
}

/// The GPUs llama.cpp can offload to, discrete ones first (an integrated GPU's memory is the
/// system's, so it would always seem to have room), else in llama.cpp's order; none without
/// the `vulkan` feature.
pub fn accelerators() -> Result<Vec<Accelerator>> {
    super::embedded::llama_backend()?;
    let mut found: Vec<_> = llama_cpp_2::list_llama_ggml_backend_devices()
        .into_iter()
        .filter_map(|d| match d.device_type {
            LlamaBackendDeviceType::Gpu => Some((0, d)),
            LlamaBackendDeviceType::IntegratedGpu => Some((1, d)),
            _ => None,
        })
        .collect();
    found.sort_by_key(|(integrated, _)| *integrated);
    Ok(found
        .into_iter()
        .map(|(_, d)| Accelerator {
            index: d.index,
            name: d.name,
            description: d.description,
            memory_total: d.memory_total as u64,
            memory_free: d.memory_free as u64,
        })
        .collect())
}

/// Where a model of `model_bytes` goes, among `accelerators`, as `preference` asks.
pub fn place(
    preference: &Preference,
    accelerators: &[Accelerator],
    model_bytes: u64,
) -> Result<Placement> {
    let fits = |d: &Accelerator| d.memory_free >= model_bytes + HEADROOM_BYTES;
    match preference {
        Preference::Cpu => Ok(Placement::cpu(format!("{DEVICE_ENV}=cpu"))),
        Preference::Named(name) => {
            let device = accelerators
                .iter()
                .find(|d| d.name.eq_ignore_ascii_case(name))
                .ok_or_else(|| Error::InvalidSetting {
                    field: DEVICE_ENV.into(),
                    reason: format!(
                        "no device is called `{name}`; here: {}",
                        names(accelerators)
                    ),
                })?;
            Ok(Placement {
                device: Some(device.clone()),
                why: format!("{DEVICE_ENV}={name}"),
            })
        }
        Preference::Auto => Ok(match accelerators.iter().find(|d| fits(d)) {
            Some(device) => Placement {
                device: Some(device.clone()),
                why: "the first GPU with room for the model".into(),
            },
            None if accelerators.is_empty() => Placement::cpu(if cfg!(feature = "vulkan") {
                "no GPU found"
            } else {
                "built without GPU support (the `vulkan` feature)"
            }),
            None => Placement::cpu(format!(
                "no GPU has {} MiB free for it ({})",
                (model_bytes + HEADROOM_BYTES) >> 20,
                names(accelerators)
            )),
        }),
    }
}

/// Each device's name and free memory, or `none` (for messages).
fn names(accelerators: &[Accelerator]) -> String {
    if accelerators.is_empty() {
        return "none".into();
    }
    accelerators
        .iter()
        .map(|d| {
            format!(
                "{} ({}, {} MiB free)",
                d.name,
                d.description,
                d.memory_free >> 20
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the installed chat model `id` runs ([`placement_for_file`]); `None` when it is not
/// installed.
pub fn placement_of_installed(models: &Models, id: &str) -> Option<Result<Placement>> {
    let model = models.find_kind(id, ModelKind::Llm).ok()?;
    Some(placement_for_file(&model.file(MODEL_FILE)))
}

/// Where a model file runs: where it was loaded, when this process holds it (its memory on a
/// GPU is no longer free), else where it would be loaded now, as [`DEVICE_ENV`] asks. An
/// error when the setting names no device here (loading would fail the same way).
pub fn placement_for_file(path: &std::path::Path) -> Result<Placement> {
    if let Some(loaded) = super::embedded::EmbeddedBackend::shared_placement(path) {
        return Ok(loaded);
    }
    let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    place(&Preference::from_env(), &accelerators()?, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(name: &str, free_mib: u64) -> Accelerator {
        Accelerator {
            index: 1,
            name: name.into(),
            description: "Test GPU".into(),
            memory_total: 8 << 30,
            memory_free: free_mib << 20,
        }
    }

    #[test]
    fn the_preference_is_read_as_auto_cpu_or_a_name() {
        assert_eq!(Preference::parse(""), Preference::Auto);
        assert_eq!(Preference::parse(" Auto "), Preference::Auto);
        assert_eq!(Preference::parse("CPU"), Preference::Cpu);
        assert_eq!(
            Preference::parse("Vulkan1"),
            Preference::Named("Vulkan1".into())
        );
    }

    #[test]
    fn auto_takes_the_first_gpu_with_room_and_else_the_cpu() {
        let model = 1_000 << 20;
        let small = gpu("Vulkan0", 1_200);
        let large = gpu("Vulkan1", 4_000);
        let placed = place(&Preference::Auto, &[small.clone(), large.clone()], model).unwrap();
        assert_eq!(placed.device.as_ref().unwrap().name, "Vulkan1");
        assert_eq!(placed.label(), "Vulkan1 (Test GPU)");

        let placed = place(&Preference::Auto, &[small], model).unwrap();
        assert_eq!(placed.device, None);
        assert!(placed.why.contains("1512 MiB free"), "{}", placed.why);
        assert!(placed.why.contains("Vulkan0"), "{}", placed.why);

        let placed = place(&Preference::Auto, &[], model).unwrap();
        assert_eq!(placed.label(), "CPU");
    }

    #[test]
    fn cpu_is_kept_to_and_a_named_device_must_exist() {
        let found = [gpu("Vulkan0", 4_000)];
        assert_eq!(place(&Preference::Cpu, &found, 1).unwrap().device, None);
        let named = place(&Preference::Named("vulkan0".into()), &found, 1).unwrap();
        assert_eq!(named.device.unwrap().name, "Vulkan0");
        let missing = place(&Preference::Named("Vulkan7".into()), &found, 1)
            .unwrap_err()
            .to_string();
        assert!(missing.contains(DEVICE_ENV), "{missing}");
        assert!(missing.contains("`Vulkan7`"), "{missing}");
        assert!(
            missing.contains("Vulkan0 (Test GPU, 4000 MiB free)"),
            "{missing}"
        );
    }
}
