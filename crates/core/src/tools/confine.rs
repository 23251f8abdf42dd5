//! The kernel's part of the sandbox: seccomp filters every code-tool worker installs on itself
//! before it runs any tool code, in every isolation tier. The audit hook lives in Python, where
//! a tool that reaches its frame can disarm it; a seccomp filter cannot be removed by the
//! process it confines, so what it refuses stays refused: starting programs (`execve`), new
//! processes (`fork`, `clone` without `CLONE_THREAD`; threads stay allowed), tracing and
//! reading other processes, new sockets (the event loop's socket pair exists before), new
//! namespaces, mounts, device nodes, extended attributes, kernel keys, BPF and modules.
//!
//! The host compiles the filters (`seccompiler`) and hands them to the worker in its
//! environment; the worker installs them with `prctl` before its audit hook (see `worker.py`).

use base64::Engine as _;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// The filters, in the form the worker reads (`QUARRY_SECCOMP`): each program's instructions
/// as bytes, base64, programs separated by `.`. `None` where this architecture has no filter.
pub(crate) fn worker_filters() -> Option<String> {
    let arch = std::env::consts::ARCH.try_into().ok()?;
    // glibc asks for clone3 first and falls back to clone only on ENOSYS: so clone3 answers
    // ENOSYS (its flags sit in memory a filter cannot read), and clone is judged by its flags.
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .ok()?;
    let refused = SeccompFilter::new(
        refused_calls().into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .ok()?;
    let programs: Vec<String> = [clone3, refused]
        .into_iter()
        .map(|filter| BpfProgram::try_from(filter).map(|p| encode(&p)))
        .collect::<Result<_, _>>()
        .ok()?;
    Some(programs.join("."))
}

/// System calls refused outright (an empty rule list) or when their arguments match.
fn refused_calls() -> Vec<(i64, Vec<SeccompRule>)> {
    let process_not_thread = SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
        0,
    )
    .expect("a valid condition")])
    .expect("a valid rule");
    let mut calls: Vec<(i64, Vec<SeccompRule>)> = vec![(libc::SYS_clone, vec![process_not_thread])];
    calls.extend(
        [
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_socket,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_chroot,
            libc::SYS_mknodat,
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
            libc::SYS_keyctl,
            libc::SYS_add_key,
            libc::SYS_request_key,
            libc::SYS_bpf,
            libc::SYS_perf_event_open,
            libc::SYS_userfaultfd,
            libc::SYS_init_module,
            libc::SYS_finit_module,
            libc::SYS_delete_module,
            libc::SYS_kexec_load,
        ]
        .into_iter()
        .map(|call| (call, vec![])),
    );
    // x86_64 keeps the old entry points that newer architectures dropped.
    #[cfg(target_arch = "x86_64")]
    calls.extend(
        [libc::SYS_fork, libc::SYS_vfork, libc::SYS_mknod]
            .into_iter()
            .map(|call| (call, vec![])),
    );
    calls
}

/// A program as the kernel reads it (`struct sock_filter`, native byte order), base64.
fn encode(program: &BpfProgram) -> String {
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for instruction in program {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_filters_compile_for_this_architecture() {
        let filters = super::worker_filters().expect("x86_64 and aarch64 have filters");
        assert_eq!(filters.split('.').count(), 2);
    }
}
