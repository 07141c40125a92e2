//! The seccomp filter, compiled in the parent: default allow, listed syscalls fail with EPERM.
//! Always denied: tracing other processes, io_uring (it bypasses the other syscall checks),
//! kernel-module/kexec/bpf/perf, mount-namespace and keyring changes, and handle-based opens.
//! With network off, `socket`/`socketpair` fail for every family but AF_UNIX.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::SandboxError;

/// Syscalls no sandboxed command gets, whatever the policy.
const ALWAYS_DENIED: &[(&str, libc::c_long)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("setns", libc::SYS_setns),
    ("unshare", libc::SYS_unshare),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
];

fn target_arch() -> Result<TargetArch, SandboxError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(TargetArch::riscv64)
    } else {
        Err(SandboxError::Unsupported(
            "seccomp filters are built only for x86_64, aarch64 and riscv64".into(),
        ))
    }
}

/// Compiles the filter for a policy. The program is applied in the child with `seccomp(2)`.
pub fn build_filter(network: bool) -> Result<BpfProgram, SandboxError> {
    build_filter_denying(network, &[])
}

/// [`build_filter`] that also denies `extra` (name, number) syscalls, for callers whose
/// processes must give up more than a command does (evaluation trials).
pub fn build_filter_denying(
    network: bool,
    extra: &[(&str, libc::c_long)],
) -> Result<BpfProgram, SandboxError> {
    let err = |e: seccompiler::BackendError| SandboxError::Setup(format!("seccomp filter: {e}"));
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in ALWAYS_DENIED.iter().chain(extra) {
        rules.insert(*nr, Vec::new());
    }
    if !network {
        let not_unix = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(err)?;
        let rule = SeccompRule::new(vec![not_unix]).map_err(err)?;
        rules.insert(libc::SYS_socket, vec![rule.clone()]);
        rules.insert(libc::SYS_socketpair, vec![rule]);
    }
    if cfg!(target_arch = "x86_64") {
        // The x32 ABI shares the x86_64 audit arch with syscall numbers offset by bit 30 (and a
        // few x32-only numbers): deny those too, on kernels that enable x32.
        const X32: i64 = 0x4000_0000;
        let native: Vec<(i64, Vec<SeccompRule>)> =
            rules.iter().map(|(nr, r)| (*nr, r.clone())).collect();
        for (nr, r) in native {
            rules.insert(nr | X32, r);
        }
        for x32_only in [521, 539, 540] {
            // ptrace, process_vm_readv, process_vm_writev
            rules.insert(x32_only | X32, Vec::new());
        }
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target_arch()?,
    )
    .map_err(err)?;
    filter.try_into().map_err(err)
}
