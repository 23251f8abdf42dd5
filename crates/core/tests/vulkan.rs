//! The chat model on a GPU through llama.cpp's Vulkan backend, run on Mesa's software Vulkan
//! (lavapipe, Debian's `mesa-vulkan-drivers`, which scripts/setup.sh installs) so the path is
//! real on a machine without a GPU. The Vulkan loader is given lavapipe's driver alone (so a
//! real GPU on a developer's machine does not take its place), and llama.cpp, which leaves
//! CPU-type devices out unless `GGML_VK_VISIBLE_DEVICES` names them, is given device 0, both
//! before llama.cpp starts: this binary holds one test, so nothing else starts it first.
//! (Built only with the `vulkan` feature: Cargo.toml's `required-features`.)

use quarry_core::llm::device::{self, DEVICE_ENV};
use quarry_core::llm::embedded::{EmbeddedBackend, EmbeddedConfig};
use quarry_core::llm::{ChatBackend, ChatMessage, ChatRequest};
use quarry_core::models::Models;

const SMALL_MODEL: &str = "smollm2-135m-instruct-q4_1";

fn answer(backend: &EmbeddedBackend) -> String {
    let mut request = ChatRequest::new(vec![ChatMessage::user(
        "Name the planet we live on, in one word.",
    )]);
    request.max_tokens = 6;
    let response = backend.chat(&request, &mut |_| {}).unwrap();
    assert!(response.usage.completion_tokens > 0, "{response:?}");
    response.content
}

#[test]
fn the_chat_model_runs_on_a_vulkan_device_as_on_the_cpu_and_a_missing_device_is_named() {
    let lavapipe = std::fs::read_dir("/usr/share/vulkan/icd.d")
        .expect("no Vulkan drivers: install mesa-vulkan-drivers (scripts/setup.sh does)")
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("lvp_icd")
        })
        .expect("no lavapipe driver: install mesa-vulkan-drivers (scripts/setup.sh does)");
    std::env::set_var("VK_ICD_FILENAMES", &lavapipe);
    std::env::set_var("GGML_VK_VISIBLE_DEVICES", "0");
    std::env::remove_var(DEVICE_ENV);
    let found = device::accelerators().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].name, "Vulkan0");
    assert!(found[0].description.contains("llvmpipe"), "{found:?}");

    let models = Models::discover(std::path::Path::new("/nonexistent"));
    let config = EmbeddedConfig::installed(&models, SMALL_MODEL)
        .unwrap_or_else(|e| panic!("the SmolLM2 model is needed (run scripts/provision.sh): {e}"));

    // `auto` takes the first device with room for the model, and says so in the backend's info.
    let on_gpu = EmbeddedBackend::load(config.clone()).unwrap();
    let placed = on_gpu.placement().clone();
    assert_eq!(
        placed.device.as_ref().map(|d| d.name.as_str()),
        Some("Vulkan0")
    );
    assert_eq!(on_gpu.info().device, Some(placed.label()));
    let from_gpu = answer(&on_gpu);
    eprintln!("answer on {}: {from_gpu:?}", placed.label());
    drop(on_gpu);

    // The CPU when asked, with the same greedy answer: the GPU computed the same model.
    std::env::set_var(DEVICE_ENV, "cpu");
    let on_cpu = EmbeddedBackend::load(config.clone()).unwrap();
    assert_eq!(on_cpu.placement().device, None);
    assert_eq!(on_cpu.info().device.as_deref(), Some("CPU"));
    assert_eq!(answer(&on_cpu), from_gpu);
    drop(on_cpu);

    // A device that is not there is named, with the ones that are.
    std::env::set_var(DEVICE_ENV, "Vulkan7");
    let error = EmbeddedBackend::load(config).err().unwrap().to_string();
    assert!(error.contains(DEVICE_ENV), "{error}");
    assert!(
        error.contains("`Vulkan7`") && error.contains("Vulkan0 ("),
        "{error}"
    );
    std::env::remove_var(DEVICE_ENV);
}
