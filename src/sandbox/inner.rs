//! baton's inner helper: the program bubblewrap runs inside the new world
//! (`baton __sandbox-inner SPEC -- CMD…`). Landlock forbids changing the mount table, so it
//! can only be applied after bubblewrap's mounts; the helper joins the command's cgroups,
//! takes the command's PTY as controlling terminal, sets no_new_privs, applies Landlock,
//! installs the seccomp filter, waits at the start gate when baton holds one, closes every
//! inherited descriptor above stderr and execs the command.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::SandboxError;
use super::policy::SandboxPolicy;
use super::{fs_rules, syscall_filter};

/// The subcommand name bubblewrap runs baton under.
pub const SUBCOMMAND: &str = "__sandbox-inner";

/// What the inner helper applies.
/// Unknown fields are refused: a helper older than the baton that sends the spec fails
/// closed instead of silently skipping a restriction it does not know.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InnerSpec {
    pub policy: SandboxPolicy,
    /// fd 0 is the command's PTY: make it the controlling terminal (after bubblewrap's setsid).
    pub pty: bool,
    /// Inherited descriptors of the command's cgroup files (`tasks` or `cgroup.procs`, opened
    /// by baton outside): the helper writes "0" into each before anything else, so the
    /// command and everything it starts live in its pids and memory cgroups. Joining here
    /// rather than in a forked copy of baton lets baton start bubblewrap without forking
    /// itself (`posix_spawn`); the kernel checks the write against the credentials of the
    /// process that opened the file.
    pub join: Vec<RawFd>,
    /// An inherited pipe to read one byte from before the command is executed (baton's
    /// start gate: see `launch::StartGate`); end-of-file means baton will not release it.
    pub gate: Option<RawFd>,
    /// The process bound is RLIMIT_NPROC (no pids cgroup could be made): the helper lowers it
    /// to the bound plus the namespace's own tasks (see `lower_process_limit`). Counting
    /// those tasks reads `/proc`, a fifth of the helper's time, which a command in a pids
    /// cgroup does not need.
    pub rlimit_nproc: bool,
    /// The binds bubblewrap made from descriptors baton opened: before anything else runs,
    /// each destination must be the very file baton opened (see `bwrap::HeldMount`).
    #[serde(default)]
    pub held: Vec<super::bwrap::HeldMount>,
}

static HELPER: OnceLock<PathBuf> = OnceLock::new();

/// The image the running baton executes, open from its start: while baton runs the kernel
/// refuses writes to it (ETXTBSY), and renaming it or a folder above it does not change what
/// the descriptor names, so a command cannot swap it for a program that applies nothing.
static IMAGE: OnceLock<std::fs::File> = OnceLock::new();

/// Declares the running program to be baton (whose `main` dispatches [`SUBCOMMAND`]): the
/// sandbox then uses it as its inner helper. The baton binary calls this first thing.
pub fn this_binary_is_the_helper() {
    if let Ok(exe) = std::env::current_exe() {
        let _ = HELPER.set(exe);
    }
    if let Ok(image) = std::fs::File::open("/proc/self/exe") {
        let _ = IMAGE.set(image);
    }
}

/// How bubblewrap reaches the inner helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Helper {
    /// A program at a path no sandboxed command may write.
    Path(PathBuf),
    /// The running baton's own image through this descriptor, which bubblewrap inherits and
    /// executes as `/proc/self/fd/N` inside the world: the helper path lies in a folder the
    /// sandbox may write, where a command could plant or swap in a program of its own.
    Image(RawFd),
}

impl Helper {
    /// The program bubblewrap executes.
    pub fn program(&self) -> PathBuf {
        match self {
            Helper::Path(p) => p.clone(),
            Helper::Image(fd) => PathBuf::from(format!("/proc/self/fd/{fd}")),
        }
    }
}

/// The helper for a world whose writable roots (bound read-write from the host, canonical)
/// are `writable`: [`helper_path`] unless it lies beneath one of them (as written or
/// resolved), else the running baton's image; an error when there is neither.
pub fn helper_for(writable: &[PathBuf]) -> Result<Helper, SandboxError> {
    let path = helper_path()?;
    let resolved = path.canonicalize().ok();
    let Some(root) = writable
        .iter()
        .find(|r| path.starts_with(r) || resolved.as_ref().is_some_and(|c| c.starts_with(r)))
    else {
        return Ok(Helper::Path(path));
    };
    match IMAGE.get() {
        Some(image) => Ok(Helper::Image(image.as_raw_fd())),
        None => Err(SandboxError::Setup(format!(
            "the sandbox's inner helper {} lies in {}, which sandboxed commands may write: \
             a command could replace it and have the next one run unconfined (use a baton \
             installed outside every writable folder, or set BATON_SANDBOX_HELPER to one)",
            path.display(),
            root.display()
        ))),
    }
}

/// The program installed beside `baton` that is only the helper: it loads in ~0.3 ms where
/// the whole agent takes ~1.5 ms, on every sandboxed command.
pub const HELPER_PROGRAM: &str = "baton-sandbox-inner";

/// The program that serves as inner helper: `baton-sandbox-inner` beside the running baton,
/// else the running baton itself, else `$BATON_SANDBOX_HELPER`, else a `baton` beside the
/// running program or one folder up (a test binary in `target/debug/deps/`). Both programs
/// take the same arguments (`__sandbox-inner SPEC -- CMD…`).
pub fn helper_path() -> Result<PathBuf, SandboxError> {
    if let Some(p) = HELPER.get() {
        let small = p.with_file_name(HELPER_PROGRAM);
        return Ok(if small.is_file() { small } else { p.clone() });
    }
    if let Some(p) = std::env::var_os("BATON_SANDBOX_HELPER") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()
        .map_err(|e| SandboxError::Setup(format!("finding the running program: {e}")))?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("baton"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            SandboxError::Setup(format!(
                "no baton binary to serve as the sandbox's inner helper beside {} \
                 (set BATON_SANDBOX_HELPER to its path)",
                exe.display()
            ))
        })
}

/// The helper's arguments after the program name: `__sandbox-inner SPEC -- program args…`.
pub fn helper_args(spec: &InnerSpec, argv: &[OsString]) -> Result<Vec<OsString>, SandboxError> {
    let json = serde_json::to_string(spec)
        .map_err(|e| SandboxError::Setup(format!("encoding the sandbox spec: {e}")))?;
    let mut out = vec![
        OsString::from(SUBCOMMAND),
        OsString::from(json),
        "--".into(),
    ];
    out.extend(argv.iter().cloned());
    Ok(out)
}

/// Runs the inner helper when `args` (the process's, program name first) ask for it;
/// never returns then. Returns to the caller otherwise.
pub fn run_if_requested(args: &[OsString]) -> Option<i32> {
    if args.get(1).map(|a| a.as_bytes()) != Some(SUBCOMMAND.as_bytes()) {
        return None;
    }
    Some(run(&args[2..]))
}

fn fail(what: &str, e: impl std::fmt::Display) -> i32 {
    // The PTY may be in raw output mode: end the line explicitly.
    eprint!("baton sandbox: {what}: {e}\r\n");
    126
}

fn run(args: &[OsString]) -> i32 {
    let (Some(spec), Some(sep)) = (args.first(), args.get(1)) else {
        return fail("inner helper", "missing spec");
    };
    if sep != "--" || args.len() < 3 {
        return fail("inner helper", "usage: __sandbox-inner SPEC -- CMD…");
    }
    let spec: InnerSpec = match serde_json::from_slice(spec.as_bytes()) {
        Ok(s) => s,
        Err(e) => return fail("inner helper spec", e),
    };
    let argv = &args[2..];
    if let Err(e) = restrict(&spec) {
        return fail("setting up the sandbox", e);
    }
    let c_args: Result<Vec<CString>, _> = argv
        .iter()
        .map(|a| CString::new(a.clone().into_vec()))
        .collect();
    let Ok(c_args) = c_args else {
        return fail("running the command", "an argument contains a NUL byte");
    };
    // The command's own variables take their names only now, for its `exec` alone.
    let c_env: Result<Vec<CString>, _> = super::env::command_only_unwrapped(std::env::vars_os())
        .into_iter()
        .map(|(name, value)| {
            let mut entry = name.into_vec();
            entry.push(b'=');
            entry.extend(value.into_vec());
            CString::new(entry)
        })
        .collect();
    let Ok(c_env) = c_env else {
        return fail("running the command", "a variable contains a NUL byte");
    };
    let Err(errno) = nix::unistd::execvpe(&c_args[0], &c_args, &c_env);
    let err = std::io::Error::from(errno);
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    eprint!(
        "baton sandbox: running {}: {err}\r\n",
        Path::new(&argv[0]).display()
    );
    code
}

/// Lowers RLIMIT_NPROC (never raises it) to `max` processes besides those already running
/// as this user here. Where RLIMIT_NPROC is the process bound, baton set it before
/// bubblewrap with headroom for everything the user ran outside at that moment; inside the
/// command's user namespace only the namespace's own tasks count against it, so without this
/// a command could start as many more processes as the user had then (72–80 under a bound of
/// 64 seen in tests). Only called where RLIMIT_NPROC is the bound.
fn lower_process_limit(max: u32) -> Result<(), String> {
    // Includes this helper, which becomes the command: the command's own process counts
    // against `max`, as it does in a pids cgroup.
    let running = super::pids::user_process_count().saturating_sub(1);
    let want = u64::from(max).saturating_add(running);
    use nix::sys::resource::{RLIM_INFINITY, Resource};
    let (cur, max) = nix::sys::resource::getrlimit(Resource::RLIMIT_NPROC)
        .map_err(|e| format!("getrlimit(RLIMIT_NPROC): {}", std::io::Error::from(e)))?;
    if cur != RLIM_INFINITY && cur <= want {
        return Ok(());
    }
    let hard = if max == RLIM_INFINITY {
        want
    } else {
        max.min(want)
    };
    nix::sys::resource::setrlimit(Resource::RLIMIT_NPROC, want, hard)
        .map_err(|e| format!("setrlimit(RLIMIT_NPROC): {}", std::io::Error::from(e)))
}

/// Everything the helper applies before exec, in order.
fn restrict(spec: &InnerSpec) -> Result<(), String> {
    use nix::sys::signal::{SigHandler, Signal};
    // SIGPIPE too: the Rust runtime of this helper ignores it, an ignored signal stays
    // ignored across exec, and a command must die of a closed pipe (`yes | head -1`)
    // instead of printing "Broken pipe" errors.
    for sig in [
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGPIPE,
    ] {
        // SAFETY: restoring the default disposition installs no handler.
        let _ = unsafe { nix::sys::signal::signal(sig, SigHandler::SigDfl) };
    }
    for mount in &spec.held {
        mount.check()?;
    }
    for &fd in &spec.join {
        // SAFETY: baton opened these cgroup files for bubblewrap to pass on; nothing in the
        // helper closes them before `close_inherited_fds`.
        let err = match rustix::io::write(unsafe { BorrowedFd::borrow_raw(fd) }, b"0") {
            Ok(1) => continue,
            Ok(_) => std::io::ErrorKind::WriteZero.into(),
            Err(e) => std::io::Error::from(e),
        };
        return Err(format!(
            "joining the command's cgroup (descriptor {fd}): {err}"
        ));
    }
    if spec.rlimit_nproc {
        lower_process_limit(spec.policy.max_processes)?;
    }
    // bubblewrap's setsid makes its pid-1 reaper the session leader, not the command: the
    // helper starts its own session (no terminal yet) and takes the PTY.
    if spec.pty && rustix::process::getsid(None) != Ok(rustix::process::getpid()) {
        let _ = rustix::process::setsid();
    }
    if spec.pty {
        rustix::process::ioctl_tiocsctty(rustix::stdio::stdin()).map_err(|e| {
            format!(
                "taking the PTY as controlling terminal: {}",
                std::io::Error::from(e)
            )
        })?;
    }
    let ruleset = fs_rules::build_ruleset(&spec.policy).map_err(|e| e.to_string())?;
    let filters = syscall_filter::build_filters(spec.policy.network).map_err(|e| e.to_string())?;
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| format!("no_new_privs: {}", std::io::Error::from(e)))?;
    // SAFETY: landlock_restrict_self on a ruleset descriptor this function owns. Raw:
    // neither rustix nor nix has Landlock calls.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0) } != 0 {
        return Err(format!(
            "landlock_restrict_self: {}",
            std::io::Error::last_os_error()
        ));
    }
    drop(ruleset);
    for f in &filters {
        seccompiler::apply_filter(f).map_err(|e| format!("seccomp: {e}"))?;
    }
    if let Some(gate) = spec.gate {
        wait_at_gate(gate)?;
    }
    // Last: nothing baton's caller left open reaches the command, and neither do the gate
    // and the cgroup files (nothing ran between their use and here).
    close_inherited_fds();
    Ok(())
}

/// Blocks until baton writes its release byte into `gate`.
fn wait_at_gate(gate: RawFd) -> Result<(), String> {
    // SAFETY: the gate is baton's pipe, inherited through bubblewrap and closed only by
    // `close_inherited_fds`, after this.
    let gate = unsafe { BorrowedFd::borrow_raw(gate) };
    let mut byte = [0u8];
    match rustix::io::retry_on_intr(|| rustix::io::read(gate, &mut byte)) {
        Ok(0) => Err("baton did not release the command (start gate closed)".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "waiting at the start gate: {}",
            std::io::Error::from(e)
        )),
    }
}

/// Closes every descriptor above stderr: nothing baton's caller left open (a log file on
/// fd 7, a socket) reaches the command.
fn close_inherited_fds() {
    // SAFETY: close_range on this process's own descriptor table, which nothing in the
    // helper uses past this point. Raw: neither rustix nor nix wraps close_range.
    let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if r != 0 {
        let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|fd| *fd > 2)
            .collect();
        for fd in fds {
            // SAFETY: as for close_range above.
            unsafe { rustix::io::close(fd) };
        }
    }
}
