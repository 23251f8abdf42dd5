include!("src/command_names.rs");

fn main() {
    // Only the commands the UI uses get permissions, and capabilities/main.json grants them to
    // the main window alone.
    tauri_build::try_build(
        tauri_build::Attributes::new()
            .app_manifest(tauri_build::AppManifest::new().commands(COMMAND_NAMES)),
    )
    .expect("tauri-build failed");
}
