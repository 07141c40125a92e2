//! The Landlock ruleset for a policy, built in the parent: writes are handled (denied) everywhere
//! except beneath the writable roots; reads stay allowed. With network off, TCP bind/connect are
//! handled with no allowed port (ABI 4+); signals and abstract UNIX sockets are scoped to the
//! sandbox (ABI 6+), with the network on too. The child only calls `landlock_restrict_self`
//! on the returned fd.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

use super::SandboxError;
use super::policy::SandboxPolicy;

/// The newest ABI whose write rights this build knows how to ask for.
const TARGET_ABI: ABI = ABI::V8;

/// Landlock ABI version of the running kernel: 0 when Landlock is missing or disabled.
pub fn kernel_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;
    // SAFETY: a version query passes no pointer the kernel writes to.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 { 0 } else { v }
}

/// Builds the ruleset and returns its fd, ready for `landlock_restrict_self` in the child.
/// Fails when the kernel can't enforce the filesystem part at all (no Landlock).
pub fn build_ruleset(policy: &SandboxPolicy) -> Result<OwnedFd, SandboxError> {
    let abi = kernel_abi();
    if abi < 1 {
        return Err(SandboxError::Unsupported(
            "the kernel has no Landlock (needs Linux ≥ 5.13 with CONFIG_SECURITY_LANDLOCK=y and \
             landlock in the lsm= boot list)"
                .into(),
        ));
    }
    let err = |e: landlock::RulesetError| SandboxError::Setup(format!("landlock ruleset: {e}"));
    let write = AccessFs::from_write(TARGET_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(write)
        .map_err(err)?;
    if !policy.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET_ABI))
            .map_err(err)?;
    }
    // Abstract unix sockets are the host's IPC, not the network: with `--network` the command
    // shares the host's network namespace and would reach an X server's or a container shim's.
    ruleset = ruleset
        .scope(Scope::AbstractUnixSocket)
        .map_err(err)?
        .scope(Scope::Signal)
        .map_err(err)?;
    let created = ruleset
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(policy.write_rules().roots(), write))
        .map_err(err)?;
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| {
        SandboxError::Unsupported(format!(
            "Landlock ABI {abi} refused to create a ruleset for this policy"
        ))
    })
}

/// Confines what the calling thread (and only it) reads and writes with Landlock: reads to
/// beneath `read` and `write` (a file there, or a folder), writes to beneath `write`, setting
/// no_new_privs for that thread as Landlock requires. For work baton does in its own process
/// on paths a command or a cloned repository could have laid out — the `git` tool reading a
/// repository whose objects, refs or work tree may be links to anywhere, a commit writing into
/// `.git`, whose logs, refs and objects commands may fill with symlinks — so the kernel, not a
/// check made before, keeps it inside. Run the work on a thread of its own that ends with it.
/// Ok(false) when the kernel has no Landlock (commands are then refused anyway, so none could
/// have laid anything out, unless the sandbox is off).
pub fn confine_thread(read: &[PathBuf], write: &[PathBuf]) -> Result<bool, SandboxError> {
    if kernel_abi() < 1 {
        return Ok(false);
    }
    let err = |e: landlock::RulesetError| SandboxError::Setup(format!("landlock ruleset: {e}"));
    let write_access = AccessFs::from_write(TARGET_ABI);
    let read_access = AccessFs::ReadFile | AccessFs::ReadDir;
    let existing = |paths: &[PathBuf]| -> Vec<PathBuf> {
        paths.iter().filter_map(|r| r.canonicalize().ok()).collect()
    };
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(write_access | read_access)
        .map_err(err)?
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(existing(read), read_access))
        .map_err(err)?
        .add_rules(path_beneath_rules(
            existing(write),
            write_access | read_access,
        ))
        .map_err(err)?
        .restrict_self()
        .map_err(err)?;
    Ok(status.ruleset != RulesetStatus::NotEnforced)
}
