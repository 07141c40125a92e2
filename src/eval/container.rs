//! One sandbox for a trial's agent and verifier, as one container is in Docker: what the agent
//! leaves running (a server it was asked to start with `nohup … &`) is still running when the
//! verifier runs, and everything ends with the trial.
//!
//! The sandbox (the agent phase's bwrap, with `/tests` and `/solution` mounted from the start)
//! runs a small supervisor: a bash loop reading job ids from a FIFO the runner writes. A job is
//! a script the runner wrote into a folder the sandbox sees read-only; it runs in a session of
//! its own, and its exit status comes back as a file in a folder the sandbox may write. A job
//! past its limit has its process group killed (SIGTERM, then SIGKILL); what it started in
//! other sessions lives on, as in a container. Dropping the [`Container`] kills the sandbox and
//! with it every process of the trial.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::isolation::{Isolation, Phase};
use super::process::{Exit, Outcome};
use super::runtime::Runtime;

/// Where the runner's control folders appear in the sandbox: `in/` (read-only: the FIFO, the
/// job scripts, the staged tests) and `out/` (the jobs' exit statuses).
pub const CONTROL: &str = "/.baton-trial";

/// How long the runner waits to hand the supervisor a job: the FIFO holds 64 KiB of job lines,
/// so a write waits only when something in the trial has filled it.
const SEND_LIMIT: Duration = Duration::from_secs(2);

/// How long a job's process group gets between SIGTERM and SIGKILL (as [`super::process`]).
const KILL_GRACE: Duration = Duration::from_millis(1500);

/// The supervisor: `run ID` starts `in/ID.sh` in a new session (its wrapper records its pid,
/// the session's, then the exit status); `kill ID` signals that session's process group.
const SUPERVISOR: &str = r#"exec 3<>/.baton-trial/in/jobs || exit 111
: > /.baton-trial/out/ready
while IFS= read -r line <&3; do
  case "$line" in
    run\ *)
      id=${line#run }
      setsid /bin/bash -c 'echo $$ > "/.baton-trial/out/$1.pid"; /bin/bash "/.baton-trial/in/$1.sh"; echo $? > "/.baton-trial/out/$1.part"; mv -f "/.baton-trial/out/$1.part" "/.baton-trial/out/$1.rc"' job "$id" </dev/null >/dev/null 2>&1 &
      ;;
    kill\ *)
      id=${line#kill }
      pid=
      read -r pid < "/.baton-trial/out/$id.pid"
      case "$pid" in ''|*[!0-9]*) continue ;; esac
      kill -TERM -- "-$pid" 2>/dev/null
      ( sleep 1.5; kill -KILL -- "-$pid" 2>/dev/null ) &
      ;;
  esac
done
"#;

/// One command for the sandbox: run in `workdir` with exactly `env`, stdin closed, output into
/// the sandbox paths `stdout` and `stderr`, after the shell lines of `prelude`.
pub struct Job<'a> {
    /// Who the job runs as in a runtime's container (`docker exec --user`: a name or
    /// `uid[:gid]` of the image's user database); `None` is root. bwrap's shared sandbox runs
    /// only root's phases: a phase as another user gets a sandbox of its own.
    pub user: Option<&'a str>,
    pub workdir: &'a str,
    pub env: &'a BTreeMap<String, String>,
    pub prelude: &'a str,
    pub program: &'a str,
    pub args: &'a [String],
    pub stdout: &'a str,
    pub stderr: &'a str,
}

/// A trial's long-lived sandbox.
pub struct Container {
    child: Child,
    jobs: File,
    dir_in: PathBuf,
    dir_out: PathBuf,
    log: PathBuf,
    end: End,
}

/// What a trial's sandbox is, which says how it ends and what its jobs inherit.
enum End {
    /// bwrap's PID namespace: killing bwrap's process group ends everything in it. Jobs start
    /// from an empty environment (the host's is not theirs).
    Namespace,
    /// A container of a runtime (`--env podman|docker`), ended by the runtime. Jobs inherit the
    /// container's environment (the image's ENV), as `docker exec` does.
    Runtime {
        runtime: Arc<Runtime>,
        name: String,
        /// Removes the container if baton ends without doing so ([`Runtime::watchdog`]).
        watchdog: Option<Child>,
    },
}

/// A trial's container under a runtime: its image, name, network and mounts.
pub struct ContainerRun<'a> {
    pub image: &'a str,
    /// Unique on the host (`baton-trial-…`).
    pub name: &'a str,
    /// The trial's folder, as the container's `baton.trial.dir` label: which job a container
    /// belongs to.
    pub trial_dir: &'a Path,
    /// The host's network (`--network host`), else none but loopback.
    pub network: bool,
    /// The working dir the container starts in.
    pub workdir: &'a str,
    /// (host path, container path, read-only) bind mounts.
    pub mounts: Vec<(PathBuf, String, bool)>,
    /// Some job runs as a user other than root: the status folder takes its session's pid.
    pub non_root_jobs: bool,
}

impl Container {
    /// Starts the sandbox of `phase` (whose `control` names `control`, the host folder of
    /// `in/` and `out/`), its supervisor's own output going to `log`.
    pub fn start(
        iso: &Isolation,
        phase: &Phase,
        control: &Path,
        log: &Path,
    ) -> std::io::Result<Container> {
        let command = || iso.command(phase, "bash", &["-c".into(), SUPERVISOR.into()]);
        // A sandbox that never started because a host socket's cover was lost (see
        // `Isolation::lost_a_socket_cover`) is started again; any other end shows at the
        // first job.
        let retry = |log: &[u8]| iso.lost_a_socket_cover(log);
        Container::launch(control, log, command, retry, || End::Namespace)
    }

    /// Starts a trial's container of `runtime` (see [`ContainerRun`]), its supervisor run by
    /// the image's shell as the command (after the image's ENTRYPOINT, as Harbor runs its
    /// `sleep infinity`).
    pub fn start_in(
        runtime: &Arc<Runtime>,
        run: &ContainerRun,
        control: &Path,
        log: &Path,
    ) -> std::io::Result<Container> {
        // The runtime resolves a relative source against its own working dir, not ours.
        let mut mounts: Vec<(PathBuf, String, bool)> = run
            .mounts
            .iter()
            .map(|(host, inside, ro)| {
                let host = std::path::absolute(host).unwrap_or_else(|_| host.clone());
                (host, inside.clone(), *ro)
            })
            .collect();
        let control = std::path::absolute(control)?;
        mounts.push((control.join("in"), format!("{CONTROL}/in"), true));
        mounts.push((control.join("out"), format!("{CONTROL}/out"), false));
        // One mount per destination (the runtime refuses two): the first named wins.
        let mut seen = std::collections::BTreeSet::new();
        mounts.retain(|(_, inside, _)| seen.insert(inside.clone()));
        for (host, _, _) in &mounts {
            // The runtime's mount syntax separates its fields with these.
            let text = host.to_string_lossy();
            if text.contains(',') || text.contains(':') {
                return Err(std::io::Error::other(format!(
                    "{text}: a folder whose path holds ',' or ':' cannot be mounted into a container; choose another --out"
                )));
            }
        }
        let command = || {
            let mut cmd = runtime.command();
            cmd.args([
                "run",
                "--rm",
                "--name",
                run.name,
                "--label",
                "baton.trial=1",
            ]);
            cmd.arg("--label")
                .arg(format!("baton.trial.dir={}", run.trial_dir.display()));
            // With the network: the runtime's default one (its own namespace, the host's
            // loopback out of reach), as Docker gives a container.
            if !run.network {
                cmd.args(["--network", "none"]);
            }
            // The supervisor is root whatever the image's USER: the runner's control files
            // are root's. Each phase names its user to `exec`.
            cmd.args(["--workdir", run.workdir, "--user", "0:0"]);
            for (host, inside, read_only) in &mounts {
                let mut spec = format!(
                    "type=bind,source={},destination={inside}",
                    host.to_string_lossy()
                );
                if *read_only {
                    spec.push_str(",readonly");
                }
                cmd.arg("--mount").arg(spec);
            }
            // The verifier's tests are copied in only at its turn; a mount point the agent
            // cannot replace with a link.
            cmd.args(["--mount", "type=tmpfs,destination=/tests,tmpfs-mode=1777"]);
            cmd.args([run.image, "bash", "-c", SUPERVISOR]);
            cmd
        };
        let end = || End::Runtime {
            runtime: runtime.clone(),
            name: run.name.to_string(),
            watchdog: runtime.watchdog(run.name).ok(),
        };
        let container = Container::launch(&control, log, command, |_| false, end)?;
        if run.non_root_jobs {
            // Sticky, as /tmp: a job writes its own session's pid file, not another's.
            std::fs::set_permissions(&container.dir_out, std::fs::Permissions::from_mode(0o1777))?;
        }
        Ok(container)
    }

    /// Makes the control folders and the FIFO, then starts the supervisor `command` runs,
    /// again while `retry` says its log shows a start that never happened (twice at most).
    fn launch(
        control: &Path,
        log: &Path,
        command: impl Fn() -> std::process::Command,
        retry: impl Fn(&[u8]) -> bool,
        end: impl Fn() -> End,
    ) -> std::io::Result<Container> {
        let dir_in = control.join("in");
        let dir_out = control.join("out");
        std::fs::create_dir_all(&dir_in)?;
        std::fs::create_dir_all(&dir_out)?;
        let fifo = dir_in.join("jobs");
        // A path with a NUL in it is EINVAL: ErrorKind::InvalidInput, as before.
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )?;
        // Read and write: opening never waits for the supervisor, and writes never fail
        // because it has not opened its end yet.
        // Non-blocking: the trial can open the FIFO too and fill it, which must never stall
        // the runner ([`Container::send`]).
        let jobs = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&fifo)?;
        // The trial may not list the staged job scripts (their names are the jobs' ids, which
        // it must not learn); the runner and the supervisor open them by name.
        std::fs::set_permissions(&dir_in, std::fs::Permissions::from_mode(0o311))?;
        let mut tries = 0;
        loop {
            let out = File::create(log)?;
            let err = out.try_clone()?;
            let mut cmd = command();
            cmd.stdin(Stdio::null())
                .stdout(Stdio::from(out))
                .stderr(Stdio::from(err))
                .process_group(0);
            let mut container = Container {
                child: cmd.spawn()?,
                jobs: jobs.try_clone()?,
                dir_in: dir_in.clone(),
                dir_out: dir_out.clone(),
                log: log.to_path_buf(),
                end: end(),
            };
            tries += 1;
            let started = container.wait_ready();
            let again = !started && tries < 3 && std::fs::read(log).is_ok_and(|l| retry(&l));
            if !again {
                return Ok(container);
            }
        }
    }

    /// The command that copies the staged tests into `/tests` before the verifier runs: bwrap's
    /// `/tests` is made afresh (whatever the agent put there, a link included, goes); a
    /// container's is its own mount point, emptied.
    /// Under a runtime, saves the container's files as image `tag`; `Ok(false)` under bwrap,
    /// whose trial's files are host folders already.
    pub fn commit(&self, tag: &str) -> Result<bool, String> {
        match &self.end {
            End::Runtime { runtime, name, .. } => runtime.commit(name, tag).map(|()| true),
            End::Namespace => Ok(false),
        }
    }

    pub fn tests_prelude(&self) -> String {
        let fresh = match self.end {
            End::Namespace => "rm -rf /tests && mkdir /tests",
            End::Runtime { .. } => "find /tests -mindepth 1 -delete",
        };
        format!("{fresh} && cp -a --no-preserve=ownership {CONTROL}/in/tests/. /tests/ || exit 126")
    }

    /// Waits (30 s at most) for the supervisor to say it reads jobs; false if the sandbox
    /// ended first.
    fn wait_ready(&mut self) -> bool {
        let ready = self.dir_out.join("ready");
        let until = Instant::now() + Duration::from_secs(30);
        let mut pause = Duration::from_micros(500);
        while Instant::now() < until {
            if std::fs::symlink_metadata(&ready).is_ok() {
                return true;
            }
            if !self.alive() {
                return false;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        true
    }

    /// The host folder the sandbox sees read-only at `CONTROL/in`, for staging files.
    pub fn staging(&self) -> &Path {
        &self.dir_in
    }

    /// Whether the sandbox still runs (a trial's commands can end its supervisor).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How the sandbox ended, with the end of its supervisor's log.
    fn ended(&mut self) -> String {
        let status = match self.child.try_wait() {
            Ok(Some(s)) => s.to_string(),
            _ => "unknown status".into(),
        };
        let log = std::fs::read(&self.log).unwrap_or_default();
        let tail = String::from_utf8_lossy(&log[log.len().saturating_sub(400)..]).into_owned();
        format!(
            "the trial's sandbox ended ({status}; its commands can end its supervisor): {}",
            tail.trim()
        )
    }

    /// Writes `line` to the supervisor's FIFO by `until`: a FIFO the trial filled (it can
    /// open it too) is an error then, never a runner waiting for ever.
    fn send(&mut self, line: &str, until: Instant) -> std::io::Result<()> {
        let mut rest = line.as_bytes();
        while !rest.is_empty() {
            match self.jobs.write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= until {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the supervisor's job FIFO stayed full (something in the trial jams it)",
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Runs `job` for at most `limit`, or until `cancel` is set.
    pub fn run(&mut self, job: &Job, limit: Duration, cancel: &AtomicBool) -> Outcome {
        let started_at = Utc::now();
        let start = Instant::now();
        // Unguessable: the trial can write the status folder, and a status it wrote in advance
        // for a job of a known id would end that job at once.
        let id = uuid::Uuid::new_v4().simple().to_string();
        let done = |exit| Outcome {
            exit,
            started_at,
            finished_at: Utc::now(),
            duration: start.elapsed(),
        };
        let script = job_script(job, matches!(self.end, End::Runtime { .. }));
        if let End::Runtime { runtime, name, .. } = &self.end {
            let wrote = std::fs::write(self.dir_in.join(format!("{id}.sh")), script);
            if let Err(e) = wrote {
                return done(Exit::SpawnFailed(format!(
                    "cannot hand the trial's container a job: {e}"
                )));
            }
            let exit = exec_job(runtime, name, &id, job.user, limit, cancel);
            // The runtime's own failure (its container is gone) is not the job's status.
            if !self.alive() {
                let why = self.ended();
                return done(Exit::SpawnFailed(why));
            }
            return done(match exit {
                Exit::Code(rc) => exit_of(rc),
                other => other,
            });
        }
        let sent = std::fs::write(self.dir_in.join(format!("{id}.sh")), script)
            .and_then(|()| self.send(&format!("run {id}\n"), start + limit.min(SEND_LIMIT)));
        if let Err(e) = sent {
            return done(Exit::SpawnFailed(format!(
                "cannot hand the trial's sandbox a job: {e}"
            )));
        }
        let rc_file = self.dir_out.join(format!("{id}.rc"));
        let deadline = start + limit;
        let mut pause = Duration::from_micros(500);
        loop {
            if let Some(rc) = read_status(&self.dir_out, &rc_file) {
                return done(exit_of(rc));
            }
            if !self.alive() {
                let why = self.ended();
                return done(Exit::SpawnFailed(why));
            }
            let now = Instant::now();
            let cancelled = cancel.load(Ordering::SeqCst);
            if now >= deadline || cancelled {
                let _ = self.send(&format!("kill {id}\n"), Instant::now() + KILL_GRACE);
                // The group is gone after the grace (its status file never comes: its wrapper
                // is in the group).
                let until = Instant::now() + KILL_GRACE + Duration::from_millis(200);
                while Instant::now() < until && read_status(&self.dir_out, &rc_file).is_none() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return done(if cancelled {
                    Exit::Cancelled
                } else {
                    Exit::TimedOut
                });
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let End::Runtime {
            runtime,
            name,
            watchdog,
        } = &mut self.end
        {
            // The runtime's client is not the container: killing it would leave it running.
            runtime.remove(name);
            let _ = self.child.kill();
            let _ = self.child.wait();
            if let Some(mut watchdog) = watchdog.take() {
                if let Some(mut pipe) = watchdog.stdin.take() {
                    let _ = pipe.write_all(b"done\n");
                }
                let _ = watchdog.wait();
            }
            return;
        }
        // Reaped already (it ended): its pid may be another process's by now.
        if !self.alive() {
            return;
        }
        let pgid = rustix::process::Pid::from_child(&self.child);
        let init = crate::sandbox::pidns::namespace_init(self.child.id());
        // The sandbox's process group (bwrap, whose death takes its PID namespace, and every
        // process of the trial, with it).
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        let _ = self.child.wait();
        // The kernel ends the namespace's processes after bwrap is gone, a moment later: the
        // trial is over only when they are (a server the agent left would otherwise still
        // answer for a moment after the trial).
        if let Some(init) = init {
            crate::sandbox::pidns::wait_for_exit(&init, Some(NAMESPACE_TEARDOWN));
        }
    }
}

/// Runs the staged job `id` in a runtime's container through the runtime's own `exec`, in a
/// session of its own: its status is the one `exec` reports, which nothing in the container can
/// forge (the status files of the supervisor's jobs are the trial's to write). Past `limit`, or
/// when `cancel` is set, the job's session is ended (SIGTERM, then SIGKILL).
fn exec_job(
    runtime: &Runtime,
    name: &str,
    id: &str,
    user: Option<&str>,
    limit: Duration,
    cancel: &AtomicBool,
) -> Exit {
    let pid_file = format!("{CONTROL}/out/{id}.pid");
    let script = format!("{CONTROL}/in/{id}.sh");
    let mut cmd = runtime.command();
    cmd.arg("exec");
    if let Some(user) = user {
        cmd.args(["--user", user]);
    }
    cmd.args([name, "setsid", "-w", "/bin/bash", "-c"])
        .arg(r#"echo $$ > "$0"; exec /bin/bash "$1""#)
        .args([&pid_file, &script]);
    let (Ok(out), Ok(err)) = (File::create("/dev/null"), File::create("/dev/null")) else {
        return Exit::SpawnFailed("cannot open /dev/null".into());
    };
    let outcome = super::process::run(cmd, limit, out, err, cancel);
    if matches!(outcome.exit, Exit::TimedOut | Exit::Cancelled) {
        let mut kill = runtime.command();
        kill.args(["exec", name, "/bin/bash", "-c"])
            .arg(r#"read -r s < "$0" || exit 0; kill -TERM -- "-$s"; sleep 1.5; kill -KILL -- "-$s""#)
            .arg(&pid_file);
        if let (Ok(out), Ok(err)) = (File::create("/dev/null"), File::create("/dev/null")) {
            let _ = super::process::run(kill, KILL_GRACE * 4, out, err, &super::process::NEVER);
        }
    }
    outcome.exit
}

/// The longest a trial's end waits for its PID namespace to empty.
const NAMESPACE_TEARDOWN: Duration = Duration::from_secs(5);

/// The job's script: its working dir, the prelude, then the command with exactly its env, or
/// with its env over the container's (`inherit`).
fn job_script(job: &Job, inherit: bool) -> String {
    let q = |s: &str| {
        shlex::try_quote(s)
            .map(|c| c.into_owned())
            .unwrap_or_else(|_| "''".to_string())
    };
    let mut s = format!("cd -- {} || exit 127\n", q(job.workdir));
    if !job.prelude.is_empty() {
        s.push_str(job.prelude);
        s.push('\n');
    }
    // The runner made the output files, root's: a job of another user writes new ones in
    // their place (their folders are open to it).
    if job.user.is_some() {
        for out in [job.stdout, job.stderr] {
            if out.starts_with("/logs/") {
                s.push_str(&format!("rm -f -- {}\n", q(out)));
            }
        }
    }
    s.push_str(if inherit {
        "exec /usr/bin/env"
    } else {
        "exec /usr/bin/env -i"
    });
    for (k, v) in job.env {
        s.push(' ');
        s.push_str(&q(&format!("{k}={v}")));
    }
    // `env` would read a program named like an assignment as one: `--` cannot stop that,
    // but no program path contains `=` here.
    s.push(' ');
    s.push_str(&q(job.program));
    for a in job.args {
        s.push(' ');
        s.push_str(&q(a));
    }
    s.push_str(&format!(
        " </dev/null >{} 2>{}\n",
        q(job.stdout),
        q(job.stderr)
    ));
    s
}

/// A job's exit status file, read without following a link the trial put there.
fn read_status(dir: &Path, file: &Path) -> Option<i32> {
    let bytes = super::fsutil::read_task_bytes(dir, file).ok()?;
    String::from_utf8_lossy(&bytes).trim().parse().ok()
}

/// bash's status: 128 + N for a command ended by signal N.
fn exit_of(rc: i32) -> Exit {
    match rc {
        129..=192 => Exit::Signal(rc - 128),
        rc => Exit::Code(rc),
    }
}
