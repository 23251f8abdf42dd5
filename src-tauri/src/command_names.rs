// The commands the window may call. `build.rs` includes this file to give each one a
// permission, and `bindings.rs` tests that it names exactly the commands registered there
// and that capabilities/main.json grants each of them.
pub const COMMAND_NAMES: &[&str] = &[
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
    "list_keys",
    "create_key",
    "revoke_key",
    "list_audit",
    "orchestrator_view",
    "save_orchestrator_draft",
    "apply_orchestrator",
    "orchestrator_revision",
    "mcp_setup",
];
