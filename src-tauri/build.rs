fn main() {
    // Only the commands the UI uses get permissions, and capabilities/main.json grants them to
    // the main window alone.
    tauri_build::try_build(tauri_build::Attributes::new().app_manifest(
        tauri_build::AppManifest::new().commands(&[
            "app_status",
            "list_collections",
            "list_sources",
            "add_source",
            "remove_source",
            "pick_folder",
            "activity",
            "set_indexing_paused",
            "list_problems",
            "retry_file",
            "search",
            "preview",
            "open_result",
            "get_settings",
            "save_settings",
        ]),
    ))
    .expect("tauri-build failed");
}
