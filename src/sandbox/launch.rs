//! Spawning a command inside the sandbox. With the bubblewrap backend the command line becomes
//! `bwrap WORLD -- baton __sandbox-inner SPEC -- CMD…` (see `bwrap` and `inner`); the helper
//! joins the command's cgroups through descriptors bubblewrap inherits, and the `pre_exec`
//! hook of the outer process only sets the session, the rlimits and which descriptors survive
//! the exec. Where there is nothing for such a hook to do (no rlimit, no new session) and no
//! other thread could inherit those descriptors, bubblewrap is started without forking baton
//! ([`PreparedSandbox::spawn_alone`]: `posix_spawn`, no copy of baton's page tables). With
//! the named weaker Landlock backend the hook applies everything itself: new session → join
//! cgroup / rlimit → mount namespace with git protections → no_new_privs → Landlock → seccomp
//! → exec. Everything that allocates or opens files is prepared in the parent; the hook only
//! issues raw syscalls, which keeps it async-signal-safe in a multithreaded parent.
//!
//! A caller with work of its own to do before the command may run (the git audit's snapshot)
//! holds it at a [`StartGate`]: bubblewrap builds the world meanwhile, and the command is
//! executed only once the gate is opened.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use nix::mount::MsFlags;
use nix::sys::signal::{SigHandler, Signal};
use rustix::io::FdFlags;

use super::SandboxError;
use super::bwrap;
use super::fs_rules;
use super::inner::{self, Helper, InnerSpec};
use super::memory::{self, MemoryBound};
use super::pidns::CommandEnd;
use super::pids::{self, PidsCgroup, ProcessBound};
use super::policy::{Backend, SandboxPolicy};
use super::syscall_filter;
use crate::protocol::SandboxMode;

/// How the child relates to the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// New session with fd 0 (a PTY slave) as controlling terminal; the child leads its group.
    PtyLeader,
    /// New process group, no terminal change (pipes).
    NewGroup,
    /// Stay in the caller's group and terminal (`baton sandbox` run interactively).
    Inherit,
}

/// One bind mount the child makes in its private mount namespace.
struct BindMount {
    path: CString,
    /// Remount read-only with these flags (locked flags of the source mount kept).
    read_only: Option<MsFlags>,
}

/// User-namespace maps for a non-root caller (mounts need CAP_SYS_ADMIN in some namespace).
struct UserNs {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

/// Holds a spawned command back, right before its exec, until [`StartGate::open`]: bubblewrap
/// builds the world and the inner helper applies every restriction meanwhile, in parallel
/// with what the caller still has to do first. Dropped unopened, the command is never
/// executed (the helper reads end-of-file and exits 126).
#[derive(Debug)]
pub struct StartGate {
    write: OwnedFd,
    /// baton's copy of the write end of the [`CommandEnd`] pipe: bubblewrap has its own once
    /// spawned, and this one is closed then ([`StartGate::spawned`]) or with the gate, so
    /// that the pipe's end of file means bubblewrap is gone.
    report: Option<OwnedFd>,
}

impl StartGate {
    /// The spawn is done: bubblewrap holds its own write end of the report's pipe, and
    /// baton's is closed, so a read of the report ends when bubblewrap does (killed while it
    /// started, before it reported anything) instead of waiting on baton itself.
    pub fn spawned(&mut self) {
        self.report = None;
    }

    /// Lets the command run. An error means it is gone already (its setup failed).
    pub fn open(self) -> std::io::Result<()> {
        match rustix::io::write(&self.write, b"1") {
            Ok(1) => Ok(()),
            Ok(_) => Err(std::io::ErrorKind::WriteZero.into()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The bubblewrap command line of one command: its world, the helper and what it applies.
struct Wrapper {
    world: bwrap::Bwrap,
    helper: Helper,
    spec: InnerSpec,
    /// The write end bubblewrap reports the command's end to ([`CommandEnd`]).
    report: Option<RawFd>,
}

impl Wrapper {
    /// The descriptors bubblewrap must inherit (iterated without allocating: this runs in a
    /// forked child too).
    fn inherited(&self) -> impl Iterator<Item = BorrowedFd<'_>> + '_ {
        let image = match self.helper {
            Helper::Image(fd) => Some(fd),
            Helper::Path(_) => None,
        };
        image
            .into_iter()
            .chain(self.spec.join.iter().copied())
            .chain(self.spec.gate)
            .chain(self.report)
            .chain(self.world.held_fds())
            // SAFETY: the image is baton's own, open for the life of the process; the cgroup
            // files and the gate are owned by the `PreparedSandbox` that holds this wrapper,
            // the held binds' descriptors by `world`, the report's write end by the caller's
            // `StartGate` until the spawn is done: all outlive the borrow of `self`.
            .map(|fd| unsafe { BorrowedFd::borrow_raw(fd) })
    }
}

/// Everything the child needs, prepared before fork.
pub struct PreparedSandbox {
    mode: SandboxMode,
    backend: Backend,
    wrapper: Option<Wrapper>,
    landlock: Option<OwnedFd>,
    seccomp: Vec<Vec<seccompiler::sock_filter>>,
    mounts: Vec<BindMount>,
    userns: Option<UserNs>,
    bound: ProcessBound,
    memory: Option<MemoryBound>,
    env: Vec<(OsString, OsString)>,
    session: Session,
    /// The read end of the [`StartGate`] pipe, when the caller holds the command (bubblewrap
    /// inherits it; the helper reads it).
    gate: Option<OwnedFd>,
    /// A read end of the [`CommandEnd`] pipe kept for as long as the command may run, so
    /// that bubblewrap's report never meets a closed pipe (SIGPIPE) when the caller drops
    /// its `CommandEnd` before the command ends (an abandoned start).
    report: Option<OwnedFd>,
}

impl std::fmt::Debug for PreparedSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedSandbox")
            .field("mode", &self.mode)
            .field("backend", &self.backend)
            .field("mounts", &self.mounts.len())
            .field("memory", &self.memory)
            .field("bound", &self.bound)
            .field("session", &self.session)
            .finish()
    }
}

impl PreparedSandbox {
    /// Prepares the sandbox for `policy`. Refuses (Err) when the kernel can't enforce it;
    /// `off` prepares only the session/process-group handling.
    pub fn prepare(policy: &SandboxPolicy, session: Session) -> Result<Self, SandboxError> {
        Self::prepare_admitted(policy, session, || true)
    }

    /// [`PreparedSandbox::prepare`] with the caller's check `admitted` run beside the look at
    /// what bubblewrap's world shows (which makes nothing on disk), before anything is made:
    /// the pins git needs, cgroups. [`SandboxError::NotAdmitted`] when it says no.
    pub fn prepare_admitted(
        policy: &SandboxPolicy,
        session: Session,
        admitted: impl FnOnce() -> bool + Send,
    ) -> Result<Self, SandboxError> {
        let in_memory = bwrap::tmp_is_in_memory();
        let ahead =
            policy.mode != SandboxMode::Off && policy.backend == Backend::Bubblewrap && in_memory;
        let (admitted, looked) = if ahead {
            std::thread::scope(|scope| {
                let judged = scope.spawn(admitted);
                let looked = bwrap::world(policy);
                (judged.join().unwrap_or(false), Some(looked))
            })
        } else {
            (admitted(), None)
        };
        if !admitted {
            return Err(SandboxError::NotAdmitted);
        }
        Self::prepare_with(policy, session, looked)
    }

    /// The rest of [`PreparedSandbox::prepare`], with bubblewrap's world looked at already
    /// where `looked` holds it.
    fn prepare_with(
        policy: &SandboxPolicy,
        session: Session,
        looked: Option<Result<bwrap::Bwrap, SandboxError>>,
    ) -> Result<Self, SandboxError> {
        if policy.mode == SandboxMode::Off {
            return Ok(PreparedSandbox {
                mode: SandboxMode::Off,
                backend: policy.backend,
                wrapper: None,
                landlock: None,
                seccomp: Vec::new(),
                mounts: Vec::new(),
                userns: None,
                bound: ProcessBound::Unenforced("sandbox off".into()),
                memory: None,
                env: super::env::command_only_unwrapped(std::env::vars_os()),
                session,
                gate: None,
                report: None,
            });
        }
        let made_pins = ensure_git_protections_exist(policy);
        let mut env = policy.env.scrub(std::env::vars_os());
        if policy.backend == Backend::Bubblewrap {
            bwrap::check_usable()?;
            // A world looked at before the pins git needs were made lacks them: look again.
            let mut world = match looked {
                Some(world) if !made_pins => world?,
                _ => bwrap::world(policy)?,
            };
            // What the world binds read-write from the host: a helper found there could have
            // been planted or swapped in by an earlier command.
            let writable: Vec<std::path::PathBuf> = if policy.mode == SandboxMode::WorkspaceWrite {
                std::iter::once(&policy.workspace)
                    .chain(&policy.writable)
                    .filter_map(|p| super::policy::resolved_once(p))
                    .collect()
            } else {
                Vec::new()
            };
            let helper = inner::helper_for(&writable)?;
            // The helper must be reachable inside even where the world hides or replaces its
            // folder (a checkout under /tmp, where the private /tmp covers it). Elsewhere the
            // read-only host already shows it: one bind fewer for bubblewrap to make (each
            // read-only bind re-reads the mount table).
            if let Helper::Path(p) = &helper {
                let resolved = p.canonicalize().ok();
                if world.covers(p) || resolved.as_deref().is_none_or(|r| world.covers(r)) {
                    world.ro_bind(p, p);
                }
            }
            env.retain(|(k, _)| k != "TMPDIR");
            env.push(("TMPDIR".into(), "/tmp".into()));
            let env = super::env::loaders_for_the_command_alone(env);
            let bound = pids::prepare(policy.max_processes);
            let memory = Some(memory::prepare(policy.memory_limit(), v2_dir(&bound)));
            let held = world.held_mounts();
            let mut join = Vec::new();
            if let ProcessBound::Cgroup(cg) = &bound {
                join.push(cg.procs.as_raw_fd());
            }
            if let Some(MemoryBound::CgroupV1(cg)) = &memory {
                join.push(cg.procs.as_raw_fd());
            }
            return Ok(PreparedSandbox {
                mode: policy.mode,
                backend: Backend::Bubblewrap,
                wrapper: Some(Wrapper {
                    world,
                    helper,
                    spec: InnerSpec {
                        policy: policy.clone(),
                        pty: session == Session::PtyLeader,
                        join,
                        gate: None,
                        rlimit_nproc: matches!(bound, ProcessBound::Rlimit(_)),
                        held,
                    },
                    report: None,
                }),
                landlock: None,
                seccomp: Vec::new(),
                mounts: Vec::new(),
                userns: None,
                bound,
                memory,
                env,
                session,
                gate: None,
                report: None,
            });
        }
        // No helper runs inside: the command's own variables take their names now, in the
        // environment handed to its `exec` alone.
        let env = super::env::command_only_unwrapped(env);
        let landlock = Some(fs_rules::build_ruleset(policy)?);
        let seccomp = syscall_filter::build_filters(policy.network)?
            .into_iter()
            .collect();
        let mut mounts = Vec::new();
        let rules = policy.write_rules();
        for dir in rules.pinned() {
            mounts.push(BindMount {
                path: c_path(dir)?,
                read_only: None,
            });
        }
        for p in rules.read_only() {
            mounts.push(BindMount {
                path: c_path(p)?,
                read_only: Some(locked_mount_flags(p)),
            });
        }
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let userns =
            (!mounts.is_empty() && !rustix::process::geteuid().is_root()).then(|| UserNs {
                uid_map: format!("{uid} {uid} 1\n").into_bytes(),
                gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            });
        let bound = pids::prepare(policy.max_processes);
        let memory = Some(memory::prepare(policy.memory_limit(), v2_dir(&bound)));
        Ok(PreparedSandbox {
            mode: policy.mode,
            backend: Backend::Landlock,
            wrapper: None,
            landlock,
            seccomp,
            mounts,
            userns,
            bound,
            memory,
            env,
            session,
            gate: None,
            report: None,
        })
    }

    /// Holds the command at a [`StartGate`]: it will not be executed until the gate is
    /// opened. Call before [`PreparedSandbox::command`] (the helper learns of the gate there).
    /// `None` without bubblewrap (the sandbox off, the landlock backend): there nothing runs
    /// between the fork and the exec that could wait, since `Command::spawn` itself waits for
    /// the exec; whatever must come first has to be done before the spawn.
    /// The [`CommandEnd`] returned beside the gate tells when the command has ended; keep it
    /// until then (bubblewrap writing to a closed pipe would die of SIGPIPE).
    pub fn hold(&mut self) -> Result<Option<(StartGate, CommandEnd)>, SandboxError> {
        let Some(w) = &mut self.wrapper else {
            return Ok(None);
        };
        let pipe = |what: &str| {
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| {
                SandboxError::Setup(format!("creating {what}: {}", std::io::Error::from(e)))
            })
        };
        let (read, write) = pipe("the start gate")?;
        let (report_read, report_write) = pipe("the pipe for the command's end")?;
        // Only baton's end is non-blocking: bubblewrap's writes stay as they are.
        rustix::fs::fcntl_setfl(&report_read, rustix::fs::OFlags::NONBLOCK).map_err(|e| {
            SandboxError::Setup(format!(
                "the pipe for the command's end: {}",
                std::io::Error::from(e)
            ))
        })?;
        w.spec.gate = Some(read.as_raw_fd());
        w.report = Some(report_write.as_raw_fd());
        w.world.report_status_to(report_write.as_raw_fd());
        self.gate = Some(read);
        self.report =
            Some(report_read.try_clone().map_err(|e| {
                SandboxError::Setup(format!("the pipe for the command's end: {e}"))
            })?);
        Ok(Some((
            StartGate {
                write,
                report: Some(report_write),
            },
            CommandEnd::new(report_read),
        )))
    }

    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The bubblewrap world the command will run in, for callers that add mounts of their
    /// own (an evaluation trial's task folder) before [`PreparedSandbox::command`]; `None`
    /// with the sandbox off or the landlock backend. Mounts added here come after the
    /// policy's (they may cover them).
    pub fn world_mut(&mut self) -> Option<&mut bwrap::Bwrap> {
        self.wrapper.as_mut().map(|w| &mut w.world)
    }

    /// How the memory bound is enforced (`None` with the sandbox off).
    pub fn memory_bound(&self) -> Option<String> {
        self.memory.as_ref().map(MemoryBound::describe)
    }

    /// The `Command` that runs `program args…` in this sandbox, with the scrubbed environment
    /// (the caller may add variables). Call [`PreparedSandbox::install`] on it before spawning.
    pub fn command(
        &self,
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    ) -> Result<Command, SandboxError> {
        let mut cmd = match &self.wrapper {
            Some(w) => {
                let mut argv = vec![program.as_ref().to_owned()];
                argv.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
                w.world
                    .command(w.helper.program(), inner::helper_args(&w.spec, &argv)?)?
            }
            None => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
        };
        cmd.env_clear().envs(self.env.iter().map(|(k, v)| (k, v)));
        Ok(cmd)
    }

    /// The pids cgroup of this command, if one bounds it.
    pub fn cgroup(&self) -> Option<&PidsCgroup> {
        match &self.bound {
            ProcessBound::Cgroup(c) => Some(c),
            _ => None,
        }
    }

    /// Why the process bound is not enforced, if it isn't.
    pub fn unenforced_bound(&self) -> Option<&str> {
        match &self.bound {
            ProcessBound::Unenforced(why) if self.mode != SandboxMode::Off => Some(why),
            _ => None,
        }
    }

    /// Installs the child-side hook on `cmd`. Keep `self` alive (it owns the cgroup) for as long
    /// as the command's processes may run.
    pub fn install(self: &Arc<Self>, cmd: &mut Command) {
        let me = Arc::clone(self);
        // SAFETY: `apply_in_child` makes only raw syscalls on data prepared before fork.
        unsafe {
            cmd.pre_exec(move || me.apply_in_child());
        }
    }

    /// Spawns `cmd` (made by [`PreparedSandbox::command`], not yet [installed]) for a caller
    /// whose process runs no other thread, such as `baton sandbox`: where the launch needs no
    /// code in a forked child (bubblewrap, no new session, no rlimit to set), bubblewrap is
    /// started with `posix_spawn` (vfork: baton's memory is not copied) and the descriptors
    /// it must inherit are inheritable only for the duration of the call — which is why no
    /// other thread may spawn meanwhile. Anywhere else it installs the usual hook and forks.
    /// Keep `self` alive while the command runs, as for [`PreparedSandbox::install`].
    ///
    /// [installed]: PreparedSandbox::install
    pub fn spawn_alone(
        self: &Arc<Self>,
        cmd: &mut Command,
    ) -> std::io::Result<std::process::Child> {
        let lean = self.wrapper.as_ref().filter(|_| {
            self.session != Session::PtyLeader
                && !matches!(self.bound, ProcessBound::Rlimit(_))
                && !matches!(self.memory, Some(MemoryBound::Rlimit(_)))
                && only_thread()
        });
        let Some(w) = lean else {
            self.install(cmd);
            return cmd.spawn();
        };
        if self.session == Session::NewGroup {
            cmd.process_group(0);
        }
        let fds: Vec<BorrowedFd<'_>> = w.inherited().collect();
        for &fd in &fds {
            if let Err(e) = rustix::io::fcntl_setfd(fd, FdFlags::empty()) {
                restore_cloexec(&fds);
                return Err(e.into());
            }
        }
        let child = cmd.spawn();
        restore_cloexec(&fds);
        child
    }

    /// Runs in the forked child. Async-signal-safe: no allocation, no locks. Path arguments
    /// are `CStr`s made before the fork (rustix and nix copy any other path into a buffer,
    /// on the heap when it is long), and every error is an errno (`io::Error` holds it
    /// without allocating).
    fn apply_in_child(&self) -> std::io::Result<()> {
        // The parent may ignore these (`baton sandbox` does while it waits); the command
        // must not inherit that.
        for sig in [
            Signal::SIGINT,
            Signal::SIGQUIT,
            Signal::SIGTERM,
            Signal::SIGHUP,
        ] {
            // SAFETY: restoring the default disposition installs no handler.
            let _ = unsafe { nix::sys::signal::signal(sig, SigHandler::SigDfl) };
        }
        match self.session {
            // bubblewrap's own setsid and the inner helper's TIOCSCTTY give the command its
            // terminal; the outer process only leaves the caller's session.
            Session::PtyLeader if self.wrapper.is_some() => {
                step(rustix::process::setsid(), b"setsid")?;
            }
            Session::PtyLeader => {
                step(rustix::process::setsid(), b"setsid")?;
                step(
                    rustix::process::ioctl_tiocsctty(rustix::stdio::stdin()),
                    b"TIOCSCTTY",
                )?;
            }
            Session::NewGroup => step(rustix::process::setpgid(None, None), b"setpgid")?,
            Session::Inherit => {}
        }
        if self.mode == SandboxMode::Off {
            return Ok(());
        }
        // With bubblewrap the inner helper joins the cgroups (see `InnerSpec::join`).
        let join_here = self.wrapper.is_none();
        match &self.bound {
            ProcessBound::Cgroup(cg) if join_here => {
                step(join_cgroup(&cg.procs), b"joining the pids cgroup")?;
            }
            ProcessBound::Cgroup(_) => {}
            ProcessBound::Rlimit(n) => {
                step(
                    set_rlimit(rustix::process::Resource::Nproc, *n),
                    b"RLIMIT_NPROC",
                )?;
            }
            ProcessBound::Unenforced(_) => {}
        }
        match &self.memory {
            Some(MemoryBound::CgroupV1(cg)) if join_here => {
                step(join_cgroup(&cg.procs), b"joining the memory cgroup")?;
            }
            Some(MemoryBound::CgroupV1(_)) => {}
            Some(MemoryBound::Rlimit(n)) => {
                step(set_rlimit(rustix::process::Resource::As, *n), b"RLIMIT_AS")?;
            }
            Some(MemoryBound::CgroupV2) | None => {}
        }
        // Whatever the caller left open (a log on fd 7, a socket) must not reach the
        // command: every descriptor above stderr goes at exec.
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        // SAFETY: close_range only marks descriptors close-on-exec. Raw: neither rustix nor
        // nix wraps close_range.
        let r =
            unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) };
        step(syscall_result(r), b"close_range")?;
        if let Some(w) = &self.wrapper {
            // The image descriptor (bubblewrap executes it) and the cgroup files the helper
            // joins through alone survive into bubblewrap.
            for fd in w.inherited() {
                step(
                    rustix::io::fcntl_setfd(fd, FdFlags::empty()),
                    b"the helper's descriptors",
                )?;
            }
            return Ok(());
        }
        if !self.mounts.is_empty() {
            self.enter_mount_namespace()?;
        }
        drop_capabilities()?;
        step(rustix::thread::set_no_new_privs(true), b"no_new_privs")?;
        if let Some(fd) = &self.landlock {
            // SAFETY: landlock_restrict_self on a ruleset descriptor `self` owns. Raw:
            // neither rustix nor nix has Landlock calls.
            let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0) };
            step(syscall_result(r), b"landlock_restrict_self")?;
        }
        for filter in &self.seccomp {
            let prog = SockFprog {
                len: filter.len() as libc::c_ushort,
                filter: filter.as_ptr(),
            };
            // SAFETY: `prog` points into `filter`, which outlives the call. Raw: neither
            // rustix nor nix installs seccomp filters.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0,
                    &prog as *const SockFprog,
                )
            };
            step(syscall_result(r), b"seccomp")?;
        }
        Ok(())
    }

    /// A private mount namespace where `.git` is pinned and hooks/config are read-only.
    fn enter_mount_namespace(&self) -> std::io::Result<()> {
        use nix::sched::CloneFlags;
        let mut flags = CloneFlags::CLONE_NEWNS;
        if self.userns.is_some() {
            flags |= CloneFlags::CLONE_NEWUSER;
        }
        step(nix::sched::unshare(flags), b"unshare(mount namespace)")?;
        if let Some(ns) = &self.userns {
            // baton is not dumpable (its environment holds the API key), which makes
            // /proc/self/* root's: the maps can only be written by a dumpable process. The
            // copy of baton's memory this child holds is replaced at its exec.
            step(
                rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable),
                b"PR_SET_DUMPABLE",
            )?;
            write_proc(c"/proc/self/setgroups", b"deny")?;
            write_proc(c"/proc/self/uid_map", &ns.uid_map)?;
            write_proc(c"/proc/self/gid_map", &ns.gid_map)?;
        }
        // nix rather than rustix: rustix's remount cannot pass a NULL data argument.
        const NONE: Option<&CStr> = None;
        step(
            nix::mount::mount(
                NONE,
                c"/",
                NONE,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                NONE,
            ),
            b"making mounts private",
        )?;
        for m in &self.mounts {
            let p = m.path.as_c_str();
            step(
                nix::mount::mount(Some(p), p, NONE, MsFlags::MS_BIND, NONE),
                b"bind-mounting a protected git path",
            )?;
            if let Some(locked) = m.read_only {
                let f = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | locked;
                step(
                    nix::mount::mount(NONE, p, NONE, f, NONE),
                    b"remounting a git path read-only",
                )?;
            }
        }
        Ok(())
    }
}

/// Takes every capability away from the command of the Landlock backend, which runs in the
/// caller's user namespace (root's, for root): the bounding and ambient sets emptied and the
/// securebits locked so that no exec (a set-user-ID-root program, a file with capabilities)
/// gives any back, then the thread's own sets. Without capabilities to begin with (anyone
/// but root) there is nothing to take.
fn drop_capabilities() -> std::io::Result<()> {
    use rustix::thread::{CapabilitiesSecureBits as Bits, CapabilitySet, CapabilitySets};
    let held = step(rustix::thread::capabilities(None), b"capget")?;
    if held.permitted.is_empty() && held.effective.is_empty() {
        return Ok(());
    }
    for bit in 0..64 {
        let cap = CapabilitySet::from_bits_retain(1 << bit);
        match rustix::thread::capability_is_in_bounding_set(cap) {
            Ok(true) => step(
                rustix::thread::remove_capability_from_bounding_set(cap),
                b"PR_CAPBSET_DROP",
            )?,
            Ok(false) => {}
            // Past the last capability this kernel knows.
            Err(_) => break,
        }
    }
    step(
        rustix::thread::set_capabilities_secure_bits(
            Bits::NO_ROOT
                | Bits::NO_ROOT_LOCKED
                | Bits::NO_SETUID_FIXUP
                | Bits::NO_SETUID_FIXUP_LOCKED
                | Bits::KEEP_CAPS_LOCKED
                | Bits::NO_CAP_AMBIENT_RAISE
                | Bits::NO_CAP_AMBIENT_RAISE_LOCKED,
        ),
        b"PR_SET_SECUREBITS",
    )?;
    step(
        rustix::thread::clear_ambient_capability_set(),
        b"PR_CAP_AMBIENT_CLEAR_ALL",
    )?;
    step(
        rustix::thread::set_capabilities(
            None,
            CapabilitySets {
                effective: CapabilitySet::empty(),
                permitted: CapabilitySet::empty(),
                inheritable: CapabilitySet::empty(),
            },
        ),
        b"capset",
    )
}

/// Marks `fds` close-on-exec again.
fn restore_cloexec(fds: &[BorrowedFd<'_>]) {
    for &fd in fds {
        let _ = rustix::io::fcntl_setfd(fd, FdFlags::CLOEXEC);
    }
}

/// Whether this process runs a single thread (field 20 of `/proc/self/stat`): then nothing
/// can spawn a program while [`PreparedSandbox::spawn_alone`] has descriptors inheritable.
fn only_thread() -> bool {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return false;
    };
    // The command name (field 2) is in parentheses and may hold spaces; the thread count is
    // the 18th field after it.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_ascii_whitespace().nth(17))
        .is_some_and(|n| n == "1")
}

/// The command's pids cgroup when it is a v2 one (the memory bound can go in it too).
fn v2_dir(bound: &ProcessBound) -> Option<&Path> {
    match bound {
        ProcessBound::Cgroup(c) if !c.dir().starts_with("/sys/fs/cgroup/pids") => Some(c.dir()),
        _ => None,
    }
}

#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const seccompiler::sock_filter,
}

/// Passes a child step's result on, after telling the terminal which step failed.
fn step<T, E: Into<std::io::Error>>(r: Result<T, E>, what: &'static [u8]) -> std::io::Result<T> {
    r.map_err(|e| {
        // Converted first: an errno, which the writes below must not replace.
        let err = e.into();
        let stderr = rustix::stdio::stderr();
        let _ = rustix::io::write(stderr, b"baton sandbox: setup failed at ");
        let _ = rustix::io::write(stderr, what);
        let _ = rustix::io::write(stderr, b"\r\n");
        err
    })
}

/// The result of a raw `syscall` that returns 0 on success.
fn syscall_result(r: libc::c_long) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Moves this process into the cgroup whose `tasks` or `cgroup.procs` file `procs` is.
fn join_cgroup(procs: &std::fs::File) -> std::io::Result<()> {
    match rustix::io::write(procs, b"0") {
        Ok(1) => Ok(()),
        Ok(_) => Err(std::io::ErrorKind::WriteZero.into()),
        Err(e) => Err(e.into()),
    }
}

fn set_rlimit(resource: rustix::process::Resource, n: u64) -> rustix::io::Result<()> {
    let lim = rustix::process::Rlimit {
        current: Some(n),
        maximum: Some(n),
    };
    rustix::process::setrlimit(resource, lim)
}

fn write_proc(path: &CStr, data: &[u8]) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let fd = step(
        rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty()),
        b"opening a /proc/self map",
    )?;
    let written = match rustix::io::write(&fd, data) {
        Ok(n) if n == data.len() => Ok(()),
        Ok(_) => Err(std::io::ErrorKind::WriteZero.into()),
        Err(e) => Err(std::io::Error::from(e)),
    };
    drop(fd);
    step(written, b"writing a /proc/self map")
}

fn c_path(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Setup(format!("path {} contains a NUL byte", p.display())))
}

/// Mount flags a remount inside a user namespace must keep (the kernel locks them).
fn locked_mount_flags(p: &Path) -> MsFlags {
    use rustix::fs::StatVfsMountFlags as St;
    // A path with a NUL byte is EINVAL: no flags, as for any other failure.
    let Ok(st) = rustix::fs::statvfs(p) else {
        return MsFlags::empty();
    };
    let mut f = MsFlags::empty();
    for (st_flag, ms_flag) in [
        (St::NOSUID, MsFlags::MS_NOSUID),
        (St::NODEV, MsFlags::MS_NODEV),
        (St::NOEXEC, MsFlags::MS_NOEXEC),
        (St::NOATIME, MsFlags::MS_NOATIME),
        (St::NODIRATIME, MsFlags::MS_NODIRATIME),
        (St::RELATIME, MsFlags::MS_RELATIME),
    ] {
        if st.f_flag.contains(st_flag) {
            f |= ms_flag;
        }
    }
    f
}

/// A `.git` directory without `hooks` or `config` would let a command create them; create
/// the empty defaults (what `git init` makes anyway) so the protections have something to pin.
fn ensure_git_protections_exist(policy: &SandboxPolicy) -> bool {
    let mut made = false;
    if policy.mode != SandboxMode::WorkspaceWrite {
        return made;
    }
    let mut roots = vec![policy.workspace.clone()];
    roots.extend(policy.writable.iter().cloned());
    for root in roots {
        use rustix::fs::{Mode, OFlags};
        // Through a descriptor of the folder itself, never by name: a command still running
        // (another shell session) may have put links in place of `.git` or `config`, and
        // this runs outside the sandbox. A path with a NUL byte fails (EINVAL): skipped.
        let Ok(dir) = rustix::fs::open(
            root.join(".git"),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        // Relative to `dir` with static names; O_EXCL creates only what does not exist, a
        // dangling link included, and follows nothing. Failures (it exists) are fine.
        made |= rustix::fs::mkdirat(&dir, c"hooks", Mode::from_raw_mode(0o755)).is_ok();
        made |= rustix::fs::openat(
            &dir,
            c"config",
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .is_ok();
    }
    made
}
