//! How a worker process is started confined, outside Python: bubblewrap's namespaces and
//! read-only mounts where it is installed, else a network namespace of its own, and the check
//! that the worker sees no network interface but loopback.

use std::path::PathBuf;
use std::process::Command;

use super::Interpreter;
use crate::environment::BwrapSetting;

/// bubblewrap on the `PATH` (or `QUARRY_BWRAP`; `none` turns it off).
pub(super) fn find_bwrap() -> Option<PathBuf> {
    match crate::environment::bwrap() {
        BwrapSetting::Off => None,
        BwrapSetting::At(path) => Some(path),
        BwrapSetting::Search => crate::environment::on_path("bwrap"),
    }
}

/// bubblewrap's arguments: new namespaces of every kind, the system libraries and the Python
/// installation read-only, nothing of the user's files, an empty `/tmp`, no capabilities, and
/// the whole sandbox killed with its parent.
pub(super) fn sandbox_arguments(interpreter: &Interpreter) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind-try",
        "/etc/ld.so.cache",
        "/etc/ld.so.cache",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
    ]
    .iter()
    .map(Into::into)
    .collect();
    // Merged-/usr systems link these into /usr; others have them as folders.
    for top in ["/bin", "/sbin", "/lib", "/lib32", "/lib64"] {
        let path = std::path::Path::new(top);
        match std::fs::read_link(path) {
            Ok(target) => {
                args.extend(["--symlink".into(), target.into_os_string(), top.into()]);
            }
            Err(_) if path.is_dir() => {
                args.extend(["--ro-bind".into(), top.into(), top.into()]);
            }
            Err(_) => {}
        }
    }
    for root in &interpreter.roots {
        if !root.starts_with("/usr") {
            args.extend([
                "--ro-bind".into(),
                root.clone().into_os_string(),
                root.clone().into_os_string(),
            ]);
        }
    }
    args.push("--".into());
    args
}

/// Whether the process sees no network interface but loopback (a fresh namespace).
pub(super) fn only_loopback(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/net/dev"))
        .map(|table| {
            table
                .lines()
                .skip(2)
                .filter_map(|l| l.split(':').next())
                .all(|name| name.trim() == "lo")
        })
        .unwrap_or(false)
}

#[cfg(target_os = "linux")]
pub(super) fn isolate_in_network_namespace(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe syscalls run between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNET) != 0
                && libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0
            {
                // No namespace here: the audit hook still refuses every socket.
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn isolate_in_network_namespace(_command: &mut Command) {}
