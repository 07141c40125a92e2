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
    // The new mount API: `mount_setattr` would clear the read-only flag of a bind mount.
    ("mount_setattr", libc::SYS_mount_setattr),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    // The host's clock, names, kernel log and filesystem-wide watches.
    ("adjtimex", libc::SYS_adjtimex),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("clock_settime", libc::SYS_clock_settime),
    ("settimeofday", libc::SYS_settimeofday),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    ("syslog", libc::SYS_syslog),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("quotactl", libc::SYS_quotactl),
    ("acct", libc::SYS_acct),
    ("vhangup", libc::SYS_vhangup),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
];

/// The namespace flags a `clone` may not ask for (new namespaces are bubblewrap's to make).
const CLONE_NEW_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWCGROUP,
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

fn err(e: seccompiler::BackendError) -> SandboxError {
    SandboxError::Setup(format!("seccomp filter: {e}"))
}

/// A rule matching when `(arg & mask) == value`.
fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompRule, SandboxError> {
    let cond = SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )
    .map_err(err)?;
    SeccompRule::new(vec![cond]).map_err(err)
}

/// Compiles the filters for a policy, applied in order with `seccomp(2)`: the main one
/// (listed syscalls fail with EPERM) and one that makes `clone3` fail with ENOSYS — its
/// flags live in memory a filter can't read, and ENOSYS makes libc fall back to `clone`,
/// whose flags the main filter checks.
pub fn build_filters(network: bool) -> Result<Vec<BpfProgram>, SandboxError> {
    let clone3: BTreeMap<i64, Vec<SeccompRule>> =
        [(libc::SYS_clone3, Vec::new())].into_iter().collect();
    let clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        target_arch()?,
    )
    .map_err(err)?;
    Ok(vec![
        build_filter(network)?,
        clone3.try_into().map_err(err)?,
    ])
}

/// Compiles the main filter for a policy (also the one evaluation trials load).
pub fn build_filter(network: bool) -> Result<BpfProgram, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in ALWAYS_DENIED {
        rules.insert(*nr, Vec::new());
    }
    // Character and block devices (a raw disk, /dev/kmsg); fifos and sockets stay allowed.
    let ifmt = libc::S_IFMT as u64;
    let devices = |arg| -> Result<Vec<SeccompRule>, SandboxError> {
        Ok(vec![
            masked(arg, ifmt, libc::S_IFCHR as u64)?,
            masked(arg, ifmt, libc::S_IFBLK as u64)?,
        ])
    };
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_mknod, devices(1)?);
    rules.insert(libc::SYS_mknodat, devices(2)?);
    let mut clone_rules = Vec::new();
    for flag in CLONE_NEW_FLAGS {
        clone_rules.push(masked(0, *flag as u64, *flag as u64)?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    // Pushing keystrokes into a terminal's input queue, and the Linux console's ioctls.
    // (The request constants are `c_ulong` on glibc, `c_int` on musl: hence the casts.)
    #[allow(clippy::unnecessary_cast)]
    rules.insert(
        libc::SYS_ioctl,
        vec![
            masked(1, 0xffff_ffff, libc::TIOCSTI as u64)?,
            masked(1, 0xffff_ffff, libc::TIOCLINUX as u64)?,
        ],
    );
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
