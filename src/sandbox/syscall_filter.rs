//! The seccomp filter, compiled in the parent: default allow, listed syscalls fail with EPERM.
//! Always denied: tracing other processes, io_uring (it bypasses the other syscall checks),
//! kernel-module/kexec/bpf/perf, mount-namespace and keyring changes, and handle-based opens.
//! With network off, `socket`/`socketpair` fail for every family but AF_UNIX. Commands (not
//! trials) may not give a file the set-user-ID or set-group-ID bit.

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
    // open_tree with mount attributes (Linux 6.15; the libc crate has no constant yet). New
    // syscalls share one number on every architecture.
    ("open_tree_attr", 467),
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

/// Compiles the filters a sandboxed command gets, applied in order with `seccomp(2)`: the
/// main one (listed syscalls fail with EPERM) and [`abi_guard`]. The kernel runs every filter
/// on each syscall and keeps the strictest answer.
pub fn build_filters(network: bool) -> Result<Vec<BpfProgram>, SandboxError> {
    Ok(vec![compile(command_rules(network))?, abi_guard()?])
}

/// A hand-assembled filter of eight instructions: `clone3` and `openat2` fail with ENOSYS
/// (their flags and mode live in memory a filter can't read, and ENOSYS makes libc fall back
/// to `clone` and `openat`, which the main filter checks), and on x86_64 so does every syscall
/// of the x32 ABI (numbers with bit 30 set, same audit arch) — one range check instead of a
/// second copy of the main list, which would double what the kernel evaluates at install time
/// (~0.13 ms) and on every syscall.
fn abi_guard() -> Result<BpfProgram, SandboxError> {
    let mut program = guard_head(&[libc::SYS_clone3 as u32, libc::SYS_openat2 as u32])?;
    program.push(seccompiler::sock_filter {
        code: BPF_RET_K,
        jt: 0,
        jf: 0,
        k: SECCOMP_RET_ALLOW,
    });
    Ok(program)
}

/// The trials' guard: `clone3` and the x32 ABI (a trial's own programs may use `openat2`; the
/// set-ID bits are theirs to set).
fn abi_guard_head() -> Result<BpfProgram, SandboxError> {
    guard_head(&[libc::SYS_clone3 as u32])
}

/// The guard's checks for `enosys` (the syscalls that fail with ENOSYS besides the x32 ABI):
/// a syscall they pass goes on to the instruction after them.
fn guard_head(enosys: &[u32]) -> Result<BpfProgram, SandboxError> {
    use seccompiler::sock_filter;
    const ERRNO: u32 = 0x0005_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let arch = audit_arch()?;
    let n = u8::try_from(enosys.len())
        .ok()
        .filter(|n| (1..=8).contains(n))
        .ok_or_else(|| SandboxError::Setup("the guard takes one to eight syscalls".into()))?;
    // Other architectures have no second ABI under their audit arch: the range check never
    // matches there (no syscall number reaches bit 30).
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let mut program = vec![
        ins(BPF_LD_W_ABS, 0, 0, 4),     // seccomp_data.arch
        ins(BPF_JEQ_K, 0, n + 3, arch), // another arch: the main filter decides
        ins(BPF_LD_W_ABS, 0, 0, 0),     // seccomp_data.nr
        ins(BPF_JGE_K, n, 0, X32_SYSCALL_BIT),
    ];
    for (i, nr) in (0u8..).zip(enosys) {
        // To the `ret ENOSYS` after the last comparison; past it after the last one.
        let last = i + 1 == n;
        program.push(ins(BPF_JEQ_K, n - 1 - i, u8::from(last), *nr));
    }
    program.push(ins(BPF_RET_K, 0, 0, ERRNO | libc::ENOSYS as u32));
    Ok(program)
}

/// The filter for evaluation trials, which bubblewrap loads alone (it takes one program):
/// [`abi_guard`]'s checks in front of the commands' list. A copy of the list for the x32 ABI
/// would miss its own numbers (x32 `ioctl` is 514, `kexec_load` 528: TIOCSTI went through), and
/// without the guard `clone3` would take namespace flags no filter can read.
pub fn build_filter(network: bool) -> Result<BpfProgram, SandboxError> {
    let mut program = abi_guard_head()?;
    program.extend(compile(native_rules(network))?);
    Ok(program)
}

/// When a listed syscall fails. Every argument these checks read is a 32-bit value (flags, a
/// file mode, an ioctl request, an address family), so they look at its low 32 bits only.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Deny {
    Always,
    /// The argument, masked, is one of `values`.
    MaskedIn {
        arg: u8,
        mask: u32,
        values: Vec<u32>,
    },
    /// The argument has any bit of `mask` set.
    AnyBit {
        arg: u8,
        mask: u32,
    },
    /// The argument is not `value`.
    Not {
        arg: u8,
        value: u32,
    },
}

/// The denied syscalls, by number.
type DenyList = BTreeMap<u32, Deny>;

/// The filter for `list`: [`compact`] where its jumps fit, else seccompiler's program behind
/// [`with_fast_allow`]'s search. Both decide every syscall alike (a test runs both over every
/// number); the compact one is a third of the size, and the kernel converts and JIT-compiles
/// a filter at every install: with seccompiler's 483 instructions that was a third of the
/// inner helper's time.
fn compile(list: DenyList) -> Result<BpfProgram, SandboxError> {
    let arch = audit_arch()?;
    if let Some(program) = compact(&list, arch) {
        return Ok(program);
    }
    let listed: Vec<u32> = list.keys().copied().collect();
    let linear = seccompiler_program(&list)?;
    Ok(with_fast_allow(linear, &listed, arch))
}

/// seccompiler's program for `list`: the arch check, then each listed syscall compared in turn.
fn seccompiler_program(list: &DenyList) -> Result<BpfProgram, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, deny) in list {
        let r = match deny {
            Deny::Always => Vec::new(),
            Deny::MaskedIn { arg, mask, values } => values
                .iter()
                .map(|v| masked(*arg, u64::from(*mask), u64::from(*v)))
                .collect::<Result<_, _>>()?,
            Deny::AnyBit { arg, mask } => (0..32)
                .map(|b| 1u32 << b)
                .filter(|bit| mask & bit != 0)
                .map(|bit| masked(*arg, u64::from(bit), u64::from(bit)))
                .collect::<Result<_, _>>()?,
            Deny::Not { arg, value } => {
                let ne = SeccompCondition::new(
                    *arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Ne,
                    u64::from(*value),
                )
                .map_err(err)?;
                vec![SeccompRule::new(vec![ne]).map_err(err)?]
            }
        };
        rules.insert(i64::from(*nr), r);
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

/// The audit arch seccomp reports for this build's native syscalls.
fn audit_arch() -> Result<u32, SandboxError> {
    Ok(match target_arch()? {
        TargetArch::x86_64 => 0xC000_003E,
        TargetArch::aarch64 => 0xC000_00B7,
        TargetArch::riscv64 => 0xC000_00F3,
    })
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_JA: u16 = 0x05;
const BPF_RET_K: u16 = 0x06;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_JSET_K: u16 = 0x45;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;
/// Where `seccomp_data.args[i]`'s low 32 bits are (little-endian: the first word).
#[cfg(target_endian = "little")]
const fn arg_low(i: u8) -> u32 {
    16 + 8 * i as u32
}

/// The whole filter for `list`, assembled here: the arch check (another arch kills the
/// process, as seccompiler's does), a binary search of the syscall number in which each listed
/// number ends in `ret EPERM` or a jump to its argument check, and those checks. `None` where a
/// jump of the search would not fit in eight bits.
fn compact(list: &DenyList, arch: u32) -> Option<BpfProgram> {
    use seccompiler::sock_filter;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let nums: Vec<u32> = list.keys().copied().collect();
    let mut out = vec![
        ins(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        ins(BPF_JEQ_K, 1, 0, arch),
        ins(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        ins(BPF_LD_W_ABS, 0, 0, 0), // seccomp_data.nr
    ];
    let start = out.len();
    out.extend(search(&nums)?);
    // Each leaf's `JA` (k = the listed number) becomes the decision or a jump to its check.
    let mut checks: Vec<(usize, u32)> = Vec::new();
    for (i, op) in out.iter_mut().enumerate().skip(start) {
        if op.code != BPF_JA {
            continue;
        }
        let nr = op.k;
        match list.get(&nr)? {
            Deny::Always => *op = ins(BPF_RET_K, 0, 0, SECCOMP_RET_EPERM),
            _ => checks.push((i, nr)),
        }
    }
    for (at, nr) in checks {
        out[at].k = u32::try_from(out.len() - at - 1).ok()?;
        let deny = list.get(&nr)?;
        let (Deny::MaskedIn { arg, .. } | Deny::AnyBit { arg, .. } | Deny::Not { arg, .. }) = deny
        else {
            return None;
        };
        out.push(ins(BPF_LD_W_ABS, 0, 0, arg_low(*arg)));
        match deny {
            Deny::MaskedIn { mask, values, .. } => {
                if *mask != u32::MAX {
                    out.push(ins(BPF_ALU_AND_K, 0, 0, *mask));
                }
                let n = values.len();
                for (j, v) in values.iter().enumerate() {
                    // To the `ret EPERM` after the last comparison and the `ret ALLOW`.
                    out.push(ins(BPF_JEQ_K, u8::try_from(n - j).ok()?, 0, *v));
                }
                out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
                out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_EPERM));
            }
            Deny::AnyBit { mask, .. } => {
                out.push(ins(BPF_JSET_K, 0, 1, *mask));
                out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_EPERM));
                out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
            }
            Deny::Not { value, .. } => {
                out.push(ins(BPF_JEQ_K, 1, 0, *value));
                out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_EPERM));
                out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
            }
            Deny::Always => return None,
        }
    }
    Some(out)
}

/// `linear` (seccompiler's program, which compares the syscall number with each listed one in
/// turn) behind a binary search of `listed`: a native syscall no rule names is allowed after a
/// handful of comparisons; any other (a listed one, a foreign arch) runs `linear` unchanged, so
/// both programs decide alike. When a filter is installed the kernel runs it once per syscall
/// number to cache the ones it always allows, which made installing the linear list cost
/// ~2 µs per listed syscall.
fn with_fast_allow(linear: BpfProgram, listed: &[u32], arch: u32) -> BpfProgram {
    use seccompiler::sock_filter;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let mut nums = listed.to_vec();
    nums.sort_unstable();
    nums.dedup();
    let Some(tree) = search(&nums) else {
        return linear;
    };
    let mut out = vec![
        ins(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        ins(BPF_JEQ_K, 1, 0, arch),
        ins(BPF_JA, 0, 0, 0),       // another arch: to `linear`
        ins(BPF_LD_W_ABS, 0, 0, 0), // seccomp_data.nr
    ];
    out.extend(tree);
    let len = out.len();
    for (i, op) in out.iter_mut().enumerate() {
        // Every `JA` of the prefix goes to the first instruction of `linear`.
        if op.code == BPF_JA {
            op.k = (len - i - 1) as u32;
        }
    }
    out.extend(linear);
    out
}

/// The search over `nums` (sorted): `ret ALLOW` for what is not among them, and for each
/// listed number a `JA` whose `k` is that number, for the caller to turn into what it decides
/// (a jump to the full list, a `ret`, a jump to an argument check). `None` where a jump would
/// not fit in eight bits.
fn search(nums: &[u32]) -> Option<Vec<seccompiler::sock_filter>> {
    use seccompiler::sock_filter;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    if nums.len() <= 4 {
        // `jeq`s, `ret ALLOW`, then one slot per number: each `jeq` is `n` instructions before
        // its own slot.
        let n = u8::try_from(nums.len()).ok()?;
        let mut out: Vec<sock_filter> = nums.iter().map(|nr| ins(BPF_JEQ_K, n, 0, *nr)).collect();
        out.push(ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW));
        out.extend(nums.iter().map(|nr| ins(BPF_JA, 0, 0, *nr)));
        return Some(out);
    }
    let mid = nums.len() / 2;
    let left = search(&nums[..mid])?;
    let right = search(&nums[mid..])?;
    let jump = u8::try_from(left.len()).ok()?;
    let mut out = vec![ins(BPF_JGE_K, jump, 0, nums[mid])];
    out.extend(left);
    out.extend(right);
    Some(out)
}

/// The denied syscalls of the native ABI, with the argument checks some of them get.
/// The file mode bits that run a program with its owner's or its group's rights.
const SET_ID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;

/// [`native_rules`] and what only commands are refused: a mode with [`SET_ID_BITS`] in
/// `chmod` and its kin, in the mode `open` and `creat` make a file with, and a regular file
/// made by `mknod`. The bit is stored on disk, where the workspace is no `nosuid` mount:
/// outside the sandbox, anyone who can reach the file would run it with the rights of baton's
/// user (root's, when baton runs as root). `openat2`, whose mode lives in memory a filter
/// cannot read, fails with ENOSYS for commands ([`abi_guard`]; libc and programs fall back to
/// `openat`): a set-group-ID file made through it without group execute keeps the bit at a
/// write, and an ACL then makes it executable. Trials keep the bits: a task's setup installs
/// `sudo`, in files of the trial's own.
fn command_rules(network: bool) -> DenyList {
    let mut rules = native_rules(network);
    let set_id = |arg| Deny::AnyBit {
        arg,
        mask: SET_ID_BITS,
    };
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_chmod as u32, set_id(1));
        rules.insert(libc::SYS_creat as u32, set_id(1));
        rules.insert(libc::SYS_open as u32, set_id(2));
    }
    rules.insert(libc::SYS_fchmod as u32, set_id(1));
    rules.insert(libc::SYS_fchmodat as u32, set_id(2));
    rules.insert(libc::SYS_fchmodat2 as u32, set_id(2));
    rules.insert(libc::SYS_openat as u32, set_id(3));
    // A regular file made by `mknod` (type 0 or S_IFREG) could carry the bits too: the devices
    // `native_rules` refuses, and regular files, which every program makes with `open`.
    let made_by_mknod = |arg| Deny::MaskedIn {
        arg,
        mask: libc::S_IFMT,
        values: vec![libc::S_IFCHR, libc::S_IFBLK, libc::S_IFREG, 0],
    };
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_mknod as u32, made_by_mknod(1));
    rules.insert(libc::SYS_mknodat as u32, made_by_mknod(2));
    rules
}

fn native_rules(network: bool) -> DenyList {
    let mut rules = DenyList::new();
    for (_, nr) in ALWAYS_DENIED {
        rules.insert(*nr as u32, Deny::Always);
    }
    // Character and block devices (a raw disk, /dev/kmsg); fifos and sockets stay allowed.
    let devices = |arg| Deny::MaskedIn {
        arg,
        mask: libc::S_IFMT,
        values: vec![libc::S_IFCHR, libc::S_IFBLK],
    };
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_mknod as u32, devices(1));
    rules.insert(libc::SYS_mknodat as u32, devices(2));
    let namespaces = CLONE_NEW_FLAGS.iter().fold(0u32, |m, f| m | *f as u32);
    rules.insert(
        libc::SYS_clone as u32,
        Deny::AnyBit {
            arg: 0,
            mask: namespaces,
        },
    );
    // Pushing keystrokes into a terminal's input queue, and the Linux console's ioctls.
    // (The request constants are `c_ulong` on glibc, `c_int` on musl: hence the casts.)
    #[allow(clippy::unnecessary_cast)]
    rules.insert(
        libc::SYS_ioctl as u32,
        Deny::MaskedIn {
            arg: 1,
            mask: u32::MAX,
            values: vec![libc::TIOCSTI as u32, libc::TIOCLINUX as u32],
        },
    );
    let sockets = if network {
        // vsock is not confined by the network namespace: it reaches the hypervisor (CID 2)
        // and the VM's own services, which are no part of what `--network` (or a trial's
        // internet) allows.
        Deny::MaskedIn {
            arg: 0,
            mask: u32::MAX,
            values: vec![libc::AF_VSOCK as u32],
        }
    } else {
        Deny::Not {
            arg: 0,
            value: libc::AF_UNIX as u32,
        }
    };
    rules.insert(libc::SYS_socket as u32, sockets.clone());
    rules.insert(libc::SYS_socketpair as u32, sockets);
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a classic BPF program of the instructions `abi_guard` uses over one syscall.
    fn run(program: &BpfProgram, arch: u32, nr: u32) -> u32 {
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let i = &program[pc];
            match i.code {
                0x20 => acc = if i.k == 4 { arch } else { nr },
                0x15 | 0x35 => {
                    let taken = if i.code == 0x15 {
                        acc == i.k
                    } else {
                        acc >= i.k
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                0x06 => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn abi_guard_refuses_clone3_openat2_and_the_x32_abi_and_nothing_else() {
        let guard = abi_guard().unwrap();
        let arch = match target_arch().unwrap() {
            TargetArch::x86_64 => 0xC000_003E,
            TargetArch::aarch64 => 0xC000_00B7,
            TargetArch::riscv64 => 0xC000_00F3,
        };
        let enosys = 0x0005_0000 | libc::ENOSYS as u32;
        assert_eq!(run(&guard, arch, libc::SYS_clone3 as u32), enosys);
        assert_eq!(run(&guard, arch, libc::SYS_openat2 as u32), enosys);
        assert_eq!(
            run(&guard, arch, 0x4000_0000 | libc::SYS_getpid as u32),
            enosys
        );
        // The trials' guard lets `openat2` through to the main filter.
        let mut trials = abi_guard_head().unwrap();
        trials.push(seccompiler::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ALLOW,
        });
        assert_eq!(run(&trials, arch, libc::SYS_openat2 as u32), 0x7fff_0000);
        assert_eq!(run(&trials, arch, libc::SYS_clone3 as u32), enosys);
        assert_eq!(run(&guard, arch, 0x4000_0000 + 521), enosys);
        for nr in [
            libc::SYS_read,
            libc::SYS_clone,
            libc::SYS_execve,
            libc::SYS_openat,
        ] {
            assert_eq!(run(&guard, arch, nr as u32), 0x7fff_0000, "syscall {nr}");
        }
        // A foreign arch is the main filter's to judge, whatever the number.
        assert_eq!(
            run(&guard, 0x4000_0003, libc::SYS_clone3 as u32),
            0x7fff_0000
        );
    }

    /// Runs a classic BPF seccomp program over (arch, nr, args), the way the kernel does for
    /// the instructions seccompiler and `with_fast_allow` emit.
    fn eval(program: &BpfProgram, arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                0 => nr,
                4 => arch,
                8 | 12 => 0,
                o if (16..64).contains(&o) => {
                    let a = args[((o - 16) / 8) as usize];
                    if o % 8 == 0 {
                        a as u32
                    } else {
                        (a >> 32) as u32
                    }
                }
                o => panic!("load at {o}"),
            }
        };
        let (mut acc, mut pc) = (0u32, 0usize);
        for _ in 0..10_000 {
            let i = &program[pc];
            pc += 1;
            match i.code {
                0x20 => acc = word(i.k),
                0x00 => acc = i.k,
                0x54 => acc &= i.k,
                0x05 => pc += i.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match i.code {
                        0x15 => acc == i.k,
                        0x25 => acc > i.k,
                        0x35 => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                0x06 => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
        panic!("no return");
    }

    #[test]
    fn the_compact_filter_and_the_search_in_front_decide_every_syscall_as_seccompiler_does() {
        let arch = audit_arch().unwrap();
        #[allow(clippy::unnecessary_cast)]
        let probes: Vec<[u64; 6]> = vec![
            [0; 6],
            [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
            [libc::CLONE_NEWNS as u64 | 0x11, 0, 0, 0, 0, 0],
            [libc::CLONE_NEWCGROUP as u64 | (1 << 40), 0, 0, 0, 0, 0],
            [
                (libc::SIGCHLD as u64) | (u64::from(u32::MAX) << 32),
                0,
                0,
                0,
                0,
                0,
            ],
            [
                0,
                libc::S_IFCHR as u64,
                libc::S_IFBLK as u64 | 0o600,
                0,
                0,
                0,
            ],
            [0, libc::S_IFIFO as u64, libc::S_IFSOCK as u64, 0, 0, 0],
            [
                0,
                libc::S_IFREG as u64 | (1 << 33),
                libc::S_IFCHR as u64 | (1 << 35),
                0,
                0,
                0,
            ],
            [0, libc::TIOCSTI as u64, 0, 0, 0, 0],
            [0, libc::TIOCLINUX as u64 | (1 << 32), 0, 0, 0, 0],
            [0, libc::TIOCGWINSZ as u64, 0, 0, 0, 0],
            [libc::AF_INET as u64, 1, 0, 0, 0, 0],
            [libc::AF_UNIX as u64, 1, 0, 0, 0, 0],
            [libc::AF_UNIX as u64 | (1 << 32), 1, 0, 0, 0, 0],
            [libc::AF_VSOCK as u64, 1, 0, 0, 0, 0],
            // File modes with and without the set-ID bits, in each argument a mode may be.
            [0, 0o4755, 0o2755, 0o755, 0, 0],
            [0, 0o755, 0o644, 0o6755, 0, 0],
            [0, 0o644 | (1 << 40), 0o755, 0o1777, 0, 0],
            [u64::MAX; 6],
        ];
        for network in [false, true] {
            for list in [native_rules(network), command_rules(network), {
                let mut r = command_rules(network);
                r.insert(libc::SYS_getpid as u32 | 0x4000_0000, Deny::Always);
                r.insert(
                    libc::SYS_ioctl as u32 | 0x4000_0000,
                    r[&(libc::SYS_ioctl as u32)].clone(),
                );
                r
            }] {
                let listed: Vec<u32> = list.keys().copied().collect();
                let linear = seccompiler_program(&list).unwrap();
                let fast = with_fast_allow(linear.clone(), &listed, arch);
                let small = compact(&list, arch).expect("the compact filter fits");
                assert!(fast.len() > linear.len(), "the search was left out");
                assert!(
                    small.len() * 2 < linear.len(),
                    "compact {} vs seccompiler's {} instructions",
                    small.len(),
                    linear.len()
                );
                let numbers = (0..1100u32).chain((0..600).map(|n| n | 0x4000_0000));
                for nr in numbers.chain([u32::MAX, 0x3fff_ffff]) {
                    for a in [arch, 0x4000_0003, 0] {
                        for args in &probes {
                            let want = eval(&linear, a, nr, *args);
                            assert_eq!(
                                eval(&fast, a, nr, *args),
                                want,
                                "fast: arch {a:#x} nr {nr} args {args:?}"
                            );
                            assert_eq!(
                                eval(&small, a, nr, *args),
                                want,
                                "compact: arch {a:#x} nr {nr} args {args:?}"
                            );
                        }
                    }
                }
                // The filters still deny what they list.
                for program in [&fast, &small] {
                    assert_eq!(
                        eval(program, arch, libc::SYS_ptrace as u32, [0; 6]),
                        SECCOMP_RET_EPERM
                    );
                    assert_eq!(
                        eval(program, arch, libc::SYS_getpid as u32, [0; 6]),
                        SECCOMP_RET_ALLOW
                    );
                }
            }
        }
        // What the commands get is the compact one.
        assert_eq!(
            build_filters(false).unwrap()[0],
            compact(&command_rules(false), arch).unwrap()
        );
    }

    #[test]
    fn commands_may_not_set_the_set_id_bits_and_trials_may() {
        let arch = audit_arch().unwrap();
        let commands = &build_filters(false).unwrap()[0];
        let trials = build_filter(false).unwrap();
        let fchmodat = libc::SYS_fchmodat as u32;
        let openat = libc::SYS_openat as u32;
        for (nr, args) in [
            (libc::SYS_fchmod as u32, [3, 0o4755, 0, 0, 0, 0]),
            (fchmodat, [0, 0, 0o2755, 0, 0, 0]),
            (libc::SYS_fchmodat2 as u32, [0, 0, 0o6755, 0, 0, 0]),
            (openat, [0, 0, 0o101, 0o4755, 0, 0]),
            (libc::SYS_mknodat as u32, [0, 0, 0o102_745, 0, 0, 0]),
            (libc::SYS_mknodat as u32, [0, 0, 0o2745, 0, 0, 0]),
        ] {
            assert_eq!(eval(commands, arch, nr, args), SECCOMP_RET_EPERM, "{nr}");
            assert_eq!(eval(&trials, arch, nr, args), SECCOMP_RET_ALLOW, "{nr}");
        }
        for args in [[0, 0, 0o755, 0, 0, 0], [0, 0, 0o1777, 0, 0, 0]] {
            assert_eq!(eval(commands, arch, fchmodat, args), SECCOMP_RET_ALLOW);
        }
        assert_eq!(
            eval(commands, arch, openat, [0, 0, 0o101, 0o644, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        // Fifos and sockets are still made by `mknod`.
        let fifo = [0, 0, u64::from(libc::S_IFIFO) | 0o644, 0, 0, 0];
        assert_eq!(
            eval(commands, arch, libc::SYS_mknodat as u32, fifo),
            SECCOMP_RET_ALLOW
        );
    }

    #[test]
    fn trials_refuse_clone3_x32_ioctl_and_vsock_as_commands_do() {
        let arch = audit_arch().unwrap();
        let enosys = 0x0005_0000 | libc::ENOSYS as u32;
        #[allow(clippy::unnecessary_cast)]
        let (namespaces, tiocsti, vsock) = (
            [
                (libc::CLONE_NEWNS | libc::CLONE_NEWUSER) as u64,
                0,
                0,
                0,
                0,
                0,
            ],
            [0, libc::TIOCSTI as u64, 0, 0, 0, 0],
            [libc::AF_VSOCK as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
        );
        for network in [false, true] {
            let trials = build_filter(network).unwrap();
            let commands = build_filters(network).unwrap();
            assert_eq!(commands.len(), 2);
            assert_eq!(
                eval(&trials, arch, libc::SYS_clone3 as u32, namespaces),
                enosys
            );
            if cfg!(target_arch = "x86_64") {
                // x32's own numbers: `ioctl` is 514 there, `kexec_load` 528.
                assert_ne!(
                    eval(&trials, arch, 0x4000_0000 | 514, tiocsti),
                    SECCOMP_RET_ALLOW
                );
                assert_ne!(
                    eval(&trials, arch, 0x4000_0000 | 528, [0; 6]),
                    SECCOMP_RET_ALLOW
                );
            }
            for socket in [libc::SYS_socket, libc::SYS_socketpair] {
                assert_eq!(
                    eval(&trials, arch, socket as u32, vsock),
                    SECCOMP_RET_EPERM,
                    "network {network}"
                );
            }
            // Everything else as the commands' two filters together decide, but the set-ID
            // bits, which only commands are refused.
            let native_list = native_rules(network);
            let set_id_calls: Vec<u32> = command_rules(network)
                .into_iter()
                .filter(|(nr, deny)| native_list.get(nr) != Some(deny))
                .map(|(nr, _)| nr)
                .collect();
            let native = compile(native_rules(network)).unwrap();
            let numbers = (0..1100u32).chain((0..600).map(|n| n | 0x4000_0000));
            for nr in numbers {
                for a in [arch, 0x4000_0003] {
                    for args in [[0; 6], namespaces, tiocsti, vsock, [u64::MAX; 6]] {
                        if nr == libc::SYS_openat2 as u32 {
                            continue;
                        }
                        let guard = eval(&commands[1], a, nr, args);
                        let main = if set_id_calls.contains(&nr) {
                            eval(&native, a, nr, args)
                        } else {
                            eval(&commands[0], a, nr, args)
                        };
                        let want = if guard == SECCOMP_RET_ALLOW {
                            main
                        } else {
                            guard
                        };
                        assert_eq!(eval(&trials, a, nr, args), want, "arch {a:#x} nr {nr}");
                    }
                }
            }
        }
    }
}
