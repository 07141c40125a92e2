//! `baton eval --env podman` end to end, through the CLI: the task's image built from its
//! Dockerfile and cached, one container per trial that every phase runs in (Docker's `RUN`,
//! filesystem and process semantics for free), the baton agent reaching its model only through
//! the gateway inside a container without network, and no container left behind; `--env
//! docker` the same through the Docker CLI talking to Podman's Docker-compatible API. No
//! registry is reachable here, so the tasks build on a small base image made from this host's
//! own programs (tests/support/base-image.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::support::external::skip;
use crate::support::{MockEngine, MockReply, Script};

const BASE: &str = "localhost/baton-test-base:1";

/// What the container tests need: root (rootful podman), podman, and the base image.
struct Podman {
    /// A containers.conf for this machine, handed to podman through `CONTAINERS_CONF`.
    conf: PathBuf,
    _dir: tempfile::TempDir,
}

/// The runtime, ready, or `None` after a skip (a failure under CI) saying what is missing.
fn podman() -> Option<&'static Podman> {
    static READY: OnceLock<Result<Podman, String>> = OnceLock::new();
    let ready = READY.get_or_init(prepare_podman);
    match ready {
        Ok(p) => Some(p),
        Err(why) => {
            skip(why);
            None
        }
    }
}

fn prepare_podman() -> Result<Podman, String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("the container-runtime tests need root (rootful podman)".into());
    }
    let found = Command::new("podman").arg("--version").output();
    if !found.is_ok_and(|o| o.status.success()) {
        return Err("podman is not installed (apt-get install podman runc)".into());
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let conf = dir.path().join("containers.conf");
    std::fs::write(&conf, containers_conf()).map_err(|e| e.to_string())?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/base-image.sh");
    let built = Command::new("bash")
        .arg(&script)
        .args(["podman", BASE, env!("CARGO_BIN_EXE_baton")])
        .env("CONTAINERS_CONF", &conf)
        .output()
        .map_err(|e| e.to_string())?;
    if !built.status.success() {
        return Err(format!(
            "cannot build the test base image: {}",
            String::from_utf8_lossy(&built.stderr)
        ));
    }
    Ok(Podman { conf, _dir: dir })
}

/// This machine's container settings: containers get the open-file limit the tests run under
/// (a container may not raise it), and `runc` where it is installed (crun refuses hosts whose
/// cgroups are mounted in hybrid mode, as the CI machines' are).
fn containers_conf() -> String {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let mut conf = format!(
        "[containers]\ndefault_ulimits = [\"nofile={0}:{0}\", \"nproc=4096:4096\"]\n",
        limit.rlim_max.min(1 << 20)
    );
    if Command::new("runc").arg("--version").output().is_ok() {
        conf.push_str("[engine]\nruntime = \"runc\"\n");
    }
    conf
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A Harbor task whose Dockerfile is `dockerfile` and whose verifier passes on `check` (a
/// shell condition).
fn task(root: &Path, name: &str, dockerfile: &str, solve: &str, check: &str) -> PathBuf {
    let dir = root.join(name);
    write(
        &dir.join("task.toml"),
        &format!(
            "[task]\nname = \"t/{name}\"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n[environment]\nallow_internet = false\n"
        ),
    );
    write(
        &dir.join("instruction.md"),
        "Write 42 into /app/answer.txt.\n",
    );
    write(&dir.join("environment/Dockerfile"), dockerfile);
    write(&dir.join("environment/seed.txt"), "seed\n");
    write(&dir.join("solution/solve.sh"), solve);
    write(
        &dir.join("tests/test.sh"),
        &format!("if {check}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"),
    );
    dir
}

/// Runs `baton eval` with `args` under podman's settings; returns the job's result.json.
fn eval(p: &Podman, out: &Path, args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
    cmd.arg("eval")
        .arg("--out")
        .arg(out)
        .arg("--no-progress")
        .args(args)
        .env("CONTAINERS_CONF", &p.conf)
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().expect("baton eval runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let job = stdout
        .lines()
        .chain(stderr.lines())
        .find_map(|l| l.strip_prefix("results: "))
        .unwrap_or_else(|| panic!("no results line; stdout: {stdout}\nstderr: {stderr}"))
        .trim()
        .to_string();
    serde_json::from_str(&std::fs::read_to_string(&job).expect("result.json")).expect("json")
}

/// The trials of a job's result, each its own result.json.
fn trials(job: &serde_json::Value) -> Vec<serde_json::Value> {
    let dir = Path::new(job["job_dir"].as_str().expect("job_dir"));
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("job dir").flatten() {
        let result = entry.path().join("result.json");
        if let Ok(text) = std::fs::read_to_string(&result) {
            found.push(serde_json::from_str(&text).expect("trial json"));
        }
    }
    found
}

/// The containers of `job`'s trials still on the machine (other tests' may run meanwhile).
fn leftover_containers(p: &Podman, job: &serde_json::Value) -> String {
    let out = Command::new("podman")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=baton.trial",
            "--format",
            "{{.Names}}",
        ])
        .env("CONTAINERS_CONF", &p.conf)
        .output()
        .expect("podman ps");
    let running = String::from_utf8_lossy(&out.stdout).into_owned();
    let ours: Vec<String> = trials(job)
        .iter()
        .map(|t| format!("baton-trial-{}", t["id"].as_str().unwrap_or("?")))
        .collect();
    running
        .lines()
        .filter(|name| ours.iter().any(|o| o == name))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Docker's semantics come from the container: each `RUN` its own shell (a failure before `;`
/// does not fail it), files a `RUN` writes in a new top-level folder, writable `/usr`, `/etc`
/// and `/var`, the image's `ENV` and `WORKDIR`, and a server the agent leaves running still
/// there for the verifier. The oracle scores 1 and nop 0; the image is built once and reused;
/// no container is left.
#[test]
fn podman_trials_run_the_tasks_image_as_docker_would() {
    let Some(p) = podman() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    // A label no earlier run had: this image is built here, not found from an earlier run.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dockerfile = format!(
        "FROM {BASE}\nLABEL baton.test.nonce={nonce}\nENV GREETING=hello\nRUN false; echo 'not the last command: the RUN goes on'\nRUN mkdir -p /data && echo seeded > /data/seed.txt\nWORKDIR /srv/work\nCOPY seed.txt ./\n"
    );
    let solve = "echo 42 > /app/answer.txt\necho \"$GREETING\" > /usr/local/share-greeting\necho tool > /etc/baton-tool.conf\nmkdir -p /var/log/svc && echo up > /var/log/svc/log\npwd > /tmp/agent-pwd\nnohup sleep 600 >/dev/null 2>&1 &\necho $! > /tmp/server.pid\n";
    let check = "[ \"$(cat /app/answer.txt)\" = 42 ] && [ \"$(cat /data/seed.txt)\" = seeded ] && [ \"$(cat /usr/local/share-greeting)\" = hello ] && [ -f /etc/baton-tool.conf ] && [ -f /var/log/svc/log ] && [ \"$(cat /tmp/agent-pwd)\" = /srv/work ] && [ -f /srv/work/seed.txt ] && kill -0 \"$(cat /tmp/server.pid)\"";
    let dir = task(root.path(), "docker-semantics", &dockerfile, solve, check);
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
    write(
        &dir.join("task.toml"),
        &format!("artifacts = [\"/app/answer.txt\", \"/app/missing.txt\"]\n{toml}"),
    );
    let out = tempfile::tempdir().unwrap();
    let d = dir.to_str().unwrap();

    let oracle = eval(
        p,
        out.path(),
        &[d, "--agent", "oracle", "--env", "podman"],
        &[],
    );
    let t = &trials(&oracle)[0];
    assert_eq!(t["reward"], 1.0, "{t:#}");
    assert_eq!(t["isolation"], "podman");
    let trial_dir = Path::new(t["trial_dir"].as_str().unwrap());
    let log = std::fs::read_to_string(trial_dir.join("setup.log")).unwrap_or_default();
    assert!(log.contains("RUN mkdir -p /data"), "the build log: {log}");
    // The container's root writes the mounted folders as the host's root: out of others' reach.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(trial_dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    // Artifacts are copied out of the container, from inside it.
    let copied = std::fs::read_to_string(trial_dir.join("artifacts/answer.txt")).unwrap();
    assert_eq!(copied.trim(), "42");
    let manifest = std::fs::read_to_string(trial_dir.join("artifacts/manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(manifest[0]["status"], "ok", "{manifest:#}");
    assert_eq!(manifest[1]["status"], "missing", "{manifest:#}");

    let nop = eval(
        p,
        out.path(),
        &[d, "--agent", "nop", "--env", "podman"],
        &[],
    );
    let t = &trials(&nop)[0];
    assert_eq!(t["reward"], 0.0, "{t:#}");
    // Built by the first job: the second found the image and built nothing.
    let trial_dir = Path::new(t["trial_dir"].as_str().unwrap());
    assert!(!trial_dir.join("setup.log").exists());
    assert_eq!(leftover_containers(p, &oracle), "");
    assert_eq!(leftover_containers(p, &nop), "");
}

/// Phases run as Docker runs them: as the image's `USER` unless the task names a user for the
/// phase (`[agent].user`, `[verifier].user`), through `exec --user`; the agent's logs are
/// written as that user. Before, an image with a non-root USER was a `UserSetupError` and a
/// task naming a user was skipped under a runtime.
#[test]
fn container_phases_run_as_the_images_user_or_the_tasks() {
    let Some(p) = podman() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let dockerfile = format!(
        "FROM {BASE}\nRUN mkdir -p /app && chmod 777 /app && echo 'app:x:1000:1000::/app:/bin/bash' >> /etc/passwd && id -u > /setup-uid\nWORKDIR /app\nUSER app\n"
    );
    let solve = "id -un > /app/who\nid -u >> /app/who\necho 'as app' >&2\n";
    let check = "[ \"$(sed -n 1p /app/who)\" = app ] && [ \"$(sed -n 2p /app/who)\" = 1000 ] && [ \"$(cat /setup-uid)\" = 0 ] && [ \"$(id -u)\" = 0 ]";
    let dir = task(root.path(), "image-user", &dockerfile, solve, check);
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
    write(
        &dir.join("task.toml"),
        &toml.replace("[verifier]\n", "[verifier]\nuser = \"root\"\n"),
    );
    let out = tempfile::tempdir().unwrap();
    let d = dir.to_str().unwrap();
    let job = eval(
        p,
        out.path(),
        &[d, "--agent", "oracle", "--env", "podman"],
        &[],
    );
    let t = &trials(&job)[0];
    assert_eq!(t["reward"], 1.0, "{t:#}");
    let trial_dir = Path::new(t["trial_dir"].as_str().unwrap());
    let stderr = std::fs::read_to_string(trial_dir.join("agent/stderr.txt")).unwrap();
    assert_eq!(stderr.trim(), "as app");
    assert_eq!(leftover_containers(p, &job), "");
}

/// A multi-step task under a runtime: every step's agent and verifier run in a container
/// that starts from the files the step before left (the step's `workdir/` files and its
/// `setup.sh` go in first), each step's verifier sees only its tests, and the step images
/// are gone with the trial. Before, such a task was skipped under a runtime.
#[test]
fn multi_step_tasks_run_each_step_on_what_the_last_one_left() {
    let Some(p) = podman() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("steps");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/eval/multi-step/steps");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&fixture)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(copied.success());
    write(
        &dir.join("environment/Dockerfile"),
        &format!("FROM {BASE}\nWORKDIR /app\nCOPY base.txt /app/\n"),
    );
    let out = tempfile::tempdir().unwrap();
    let d = dir.to_str().unwrap();
    let job = eval(
        p,
        out.path(),
        &[d, "--agent", "oracle", "--env", "podman"],
        &[],
    );
    let t = &trials(&job)[0];
    assert_eq!(t["reward"], 1.0, "{t:#}");
    let steps = t["step_results"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{t:#}");
    assert_eq!(
        steps[1]["verifier_result"]["rewards"]["style"], 0.5,
        "{t:#}"
    );
    let trial_dir = Path::new(t["trial_dir"].as_str().unwrap());
    assert!(trial_dir.join("steps/extend/agent/setup.log").is_file());
    let images = Command::new("podman")
        .args(["images", "--format", "{{.Repository}}"])
        .env("CONTAINERS_CONF", &p.conf)
        .output()
        .unwrap();
    let images = String::from_utf8_lossy(&images.stdout);
    assert!(!images.contains("baton-step-"), "{images}");
    assert_eq!(leftover_containers(p, &job), "");
    let nop = eval(
        p,
        out.path(),
        &[d, "--agent", "nop", "--env", "podman"],
        &[],
    );
    assert_eq!(trials(&nop)[0]["reward"], 0.0, "{:#}", trials(&nop)[0]);
}

/// A `RUN` whose last command fails fails the image build: the trial is an environment error
/// (no reward, not a 0) and its setup.log names the step.
#[test]
fn a_failing_run_line_is_an_environment_error_naming_the_step() {
    let Some(p) = podman() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let dockerfile = format!("FROM {BASE}\nRUN true && false\nRUN echo never\n");
    let dir = task(root.path(), "failing-run", &dockerfile, "true\n", "true");
    let out = tempfile::tempdir().unwrap();
    let job = eval(
        p,
        out.path(),
        &[
            dir.to_str().unwrap(),
            "--agent",
            "oracle",
            "--env",
            "podman",
        ],
        &[],
    );
    let t = &trials(&job)[0];
    assert!(t["reward"].is_null(), "{t:#}");
    assert_eq!(
        t["exception_info"]["exception_type"], "EnvironmentSetupError",
        "{t:#}"
    );
    let message = t["exception_info"]["exception_message"].as_str().unwrap();
    assert!(message.contains("building the image"), "{message}");
    let trial_dir = Path::new(t["trial_dir"].as_str().unwrap());
    let log = std::fs::read_to_string(trial_dir.join("setup.log")).unwrap();
    assert!(log.contains("RUN true && false"), "{log}");
    assert!(!log.contains("RUN echo never"), "{log}");
}

/// The baton agent in a container without network: its model requests reach the engine only
/// through the runner's gateway, whose listener is on the container's own loopback; the key
/// never enters the container (the agent's environment, dumped by its shell command, lacks it).
#[test]
fn the_baton_agent_reaches_its_model_only_through_the_gateway_in_the_container() {
    let Some(p) = podman() else {
        return;
    };
    // A listener on the host's loopback only: a container with the network must not reach it.
    let host_only = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host_only.local_addr().unwrap().port();
    let reach_host = serde_json::json!({
        "command": format!("(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached > /logs/agent/reach.txt; echo 42 > /app/answer.txt")
    })
    .to_string();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "call_1",
                    "shell",
                    r#"{"command":"env > /logs/agent/agent-env.txt; echo 42 > /app/answer.txt"}"#,
                ),
            )
            .answer("L2", MockReply::text("Done."))
            .answer("L2", MockReply::tool_call("call_2", "shell", &reach_host))
            .answer("L2", MockReply::text("Done.")),
    );
    let root = tempfile::tempdir().unwrap();
    let dockerfile = format!("FROM {BASE}\nWORKDIR /app\n");
    let dir = task(
        root.path(),
        "agent-in-container",
        &dockerfile,
        "true\n",
        "[ \"$(cat /app/answer.txt)\" = 42 ]",
    );
    let out = tempfile::tempdir().unwrap();
    let url = engine.url();
    let job = eval_baton(
        p,
        out.path(),
        dir.to_str().unwrap(),
        "podman",
        &url,
        &[("BATON_API_KEY", "sk-secret-of-the-host")],
    );
    let t = &trials(&job)[0];
    let trial_dir = Path::new(t["trial_dir"].as_str().unwrap());
    let stderr = std::fs::read_to_string(trial_dir.join("agent/stderr.txt")).unwrap_or_default();
    assert_eq!(t["reward"], 1.0, "{t:#}; agent stderr: {stderr}");
    let env = std::fs::read_to_string(trial_dir.join("agent/agent-env.txt")).unwrap();
    assert!(!env.contains("sk-secret-of-the-host"), "{env}");
    assert!(env.contains("BATON_") || env.contains("PATH="), "{env}");
    // The engine got the key from the gateway, on the host.
    let requests = engine.requests();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|r| r.header("authorization") == Some("Bearer sk-secret-of-the-host")),
        "{:?}",
        requests
            .iter()
            .map(|r| r.header("authorization"))
            .collect::<Vec<_>>()
    );
    assert_eq!(leftover_containers(p, &job), "");

    // With the network, the container has the runtime's own network: the gateway still
    // answers on its loopback, and the host's loopback is out of reach.
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
    write(
        &dir.join("task.toml"),
        &toml.replace("allow_internet = false", "allow_internet = true"),
    );
    let job = eval_baton(
        p,
        out.path(),
        dir.to_str().unwrap(),
        "podman",
        &url,
        &[("BATON_API_KEY", "sk-secret-of-the-host")],
    );
    let t = &trials(&job)[0];
    assert_eq!(t["reward"], 1.0, "{t:#}");
    let trial_dir = Path::new(t["trial_dir"].as_str().unwrap());
    assert!(!trial_dir.join("agent/reach.txt").exists());
    drop(host_only);
}

/// Podman's Docker-compatible API on a socket of its own, for the Docker CLI; stopped on drop.
struct DockerApi {
    child: std::process::Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl DockerApi {
    fn start(p: &Podman) -> Option<DockerApi> {
        let cli = Command::new("docker").arg("--version").output();
        if !cli.is_ok_and(|o| o.status.success()) {
            skip("the docker CLI is not installed");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let child = Command::new("podman")
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", socket.display()))
            .env("CONTAINERS_CONF", &p.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("podman system service");
        let api = DockerApi {
            child,
            socket,
            _dir: dir,
        };
        for _ in 0..200 {
            let up = Command::new("docker")
                .arg("version")
                .env("DOCKER_HOST", api.host())
                .output()
                .is_ok_and(|o| o.status.success());
            if up {
                return Some(api);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("podman's Docker API did not come up");
    }

    fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }
}

impl Drop for DockerApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `--env docker` drives the Docker CLI (here against Podman's Docker-compatible API): the
/// image is built, the oracle scores 1, and the baton agent reaches its model through the
/// gateway inside the container.
#[test]
fn docker_trials_build_and_run_through_the_docker_cli() {
    let Some(p) = podman() else {
        return;
    };
    let Some(api) = DockerApi::start(p) else {
        return;
    };
    let host = api.host();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "call_1",
                    "shell",
                    r#"{"command":"echo 42 > /app/answer.txt"}"#,
                ),
            )
            .answer("L2", MockReply::text("Done.")),
    );
    let root = tempfile::tempdir().unwrap();
    let dockerfile =
        format!("FROM {BASE}\nRUN mkdir -p /data && echo docker > /data/by\nWORKDIR /app\n");
    let dir = task(
        root.path(),
        "docker-cli",
        &dockerfile,
        "echo 42 > /app/answer.txt\n",
        "[ \"$(cat /app/answer.txt)\" = 42 ] && [ \"$(cat /data/by)\" = docker ]",
    );
    let out = tempfile::tempdir().unwrap();
    let d = dir.to_str().unwrap();
    let env = [("DOCKER_HOST", host.as_str()), ("DOCKER_BUILDKIT", "0")];
    let oracle = eval(
        p,
        out.path(),
        &[d, "--agent", "oracle", "--env", "docker"],
        &env,
    );
    let t = &trials(&oracle)[0];
    assert_eq!(t["reward"], 1.0, "{t:#}");
    assert_eq!(t["isolation"], "docker");
    let url = engine.url();
    let agent = eval_baton(p, out.path(), d, "docker", &url, &env);
    let t = &trials(&agent)[0];
    assert_eq!(t["reward"], 1.0, "{t:#}");
    assert!(!engine.requests().is_empty());
    assert_eq!(leftover_containers(p, &oracle), "");
    assert_eq!(leftover_containers(p, &agent), "");
}

/// A runner that dies without ending its trials (a second Ctrl-C, SIGKILL) leaves no
/// container behind: each trial's watchdog removes its container when the runner's end of its
/// pipe closes.
#[test]
fn a_killed_runner_leaves_no_container() {
    let Some(p) = podman() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let dockerfile = format!("FROM {BASE}\nWORKDIR /app\n");
    let dir = task(root.path(), "killed-runner", &dockerfile, "true\n", "true");
    let out = tempfile::tempdir().unwrap();
    let mut runner = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "eval",
            "--agent",
            "cmd:sleep 300",
            "--env",
            "podman",
            "--no-progress",
        ])
        .arg("--out")
        .arg(out.path())
        .arg(&dir)
        .env("CONTAINERS_CONF", &p.conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("baton eval");
    let ours = || {
        let listed = Command::new("podman")
            .args(["ps", "-a", "--format", "{{.Names}} {{.Labels}}"])
            .env("CONTAINERS_CONF", &p.conf)
            .output()
            .expect("podman ps");
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .filter(|l| l.contains(&out.path().display().to_string()))
            .count()
    };
    let started = (0..600).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        ours() == 1
    });
    assert!(started, "the trial's container never started");
    runner.kill().unwrap();
    runner.wait().unwrap();
    let gone = (0..300).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        ours() == 0
    });
    assert!(gone, "the container outlived its runner");
}

/// In a container the agent is root with the runtime's usual capabilities: it can list the
/// staged job scripts, write the supervisor's status folder and jam its FIFO. The job status
/// comes from the runtime's `exec`, which it cannot forge: a status written in advance and a
/// reward of its own do not end or score the verifier, and a jammed FIFO stalls nothing.
#[test]
fn a_container_agent_cannot_forge_the_verifiers_status_or_jam_the_runner() {
    let Some(p) = podman() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let dockerfile = format!("FROM {BASE}\nWORKDIR /app\n");
    let dir = task(
        root.path(),
        "forge-in-container",
        &dockerfile,
        "true\n",
        "sleep 2; false",
    );
    let out = tempfile::tempdir().unwrap();
    let agent = r#"cmd:echo 1 > /logs/verifier/reward.txt; mkfifo /.baton-trial/out/99.pid; echo "kill 99" > /.baton-trial/in/jobs; setsid bash -c 'cat /dev/zero > /.baton-trial/in/jobs' </dev/null >/dev/null 2>&1 & setsid bash -c 'while :; do for f in /.baton-trial/in/*.sh; do id=${f##*/}; echo 0 > "/.baton-trial/out/${id%.sh}.rc"; done; echo 1 > /logs/verifier/reward.json; sleep 0.05; done' </dev/null >/dev/null 2>&1 &"#;
    let job = eval(
        p,
        out.path(),
        &[dir.to_str().unwrap(), "--agent", agent, "--env", "podman"],
        &[],
    );
    let t = &trials(&job)[0];
    assert_eq!(t["reward"], 0.0, "{t:#}");
    let verifier_secs = t["timings"]["verifier"]["duration_sec"].as_f64().unwrap();
    assert!(verifier_secs >= 2.0, "{t:#}");
    assert_eq!(leftover_containers(p, &job), "");
}

/// A runtime that cannot run containers (a Docker CLI without a daemon) stops the job before
/// any trial, with the runtime's own reason and exit code 2.
#[test]
fn a_runtime_without_its_daemon_is_a_clear_error() {
    let cli = Command::new("docker").arg("--version").output();
    if !cli.is_ok_and(|o| o.status.success()) {
        skip("the docker CLI is not installed");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dir = task(root.path(), "no-daemon", "FROM scratch\n", "true\n", "true");
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "eval",
            "--agent",
            "oracle",
            "--env",
            "docker",
            "--no-progress",
        ])
        .arg("--out")
        .arg(out.path())
        .arg(&dir)
        .env(
            "DOCKER_HOST",
            format!("unix://{}", root.path().join("no.sock").display()),
        )
        .output()
        .expect("baton eval");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--env docker: `docker images` failed"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

/// Runs `baton eval` with the baton agent on the task folder `dir` under `env`, the model at
/// `url`; the job's result.json.
fn eval_baton(
    p: &Podman,
    out: &Path,
    dir: &str,
    runtime: &str,
    url: &str,
    vars: &[(&str, &str)],
) -> serde_json::Value {
    let bin = env!("CARGO_BIN_EXE_baton");
    let args = [
        dir,
        "--agent",
        "baton",
        "--env",
        runtime,
        "--baton-bin",
        bin,
        "--",
        "--endpoint",
        url,
    ];
    eval(p, out, &args, vars)
}

/// Red team round 33 (critical): podman before 5.3.2 lets a `RUN --mount` step bind the
/// host's `/` (CVE-2024-1753: a stage holding a link to `/` as the mount's source): a task's
/// Dockerfile read and wrote host files as root while its image was built. Such a Dockerfile
/// is not built by a runtime of a version with that hole: the trial is an environment error
/// saying why, and nothing of the Dockerfile ran. On a fixed podman the test says so and
/// checks nothing more.
#[test]
fn a_run_mount_step_is_not_built_by_a_runtime_that_lets_it_reach_the_host() {
    let Some(p) = podman() else {
        return;
    };
    let version = Command::new("podman")
        .args(["version", "--format", "{{.Client.Version}}"])
        .output()
        .expect("podman version");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let numbers: Vec<u32> = version
        .split(['.', '-'])
        .take(3)
        .filter_map(|n| n.parse().ok())
        .collect();
    let fixed = matches!(numbers[..], [major, ..] if major >= 6)
        || matches!(numbers[..], [5, m, p] if (m, p) >= (3, 2));
    if fixed {
        eprintln!("podman {version} has the fix: not checked");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let marker = root.path().join("ran");
    let dockerfile = format!(
        "FROM {BASE} AS base\nRUN ln -s / /rootdir\nFROM {BASE}\n\
         RUN --mount=type=bind,from=base,source=/rootdir,destination=/host,rw \\\n  \
         touch /host{}\n",
        marker.display()
    );
    let dir = task(root.path(), "run-mount", &dockerfile, "true\n", "true");
    let out = tempfile::tempdir().unwrap();
    let job = eval(
        p,
        out.path(),
        &[dir.to_str().unwrap(), "--agent", "nop", "--env", "podman"],
        &[],
    );
    let t = &trials(&job)[0];
    assert!(t["reward"].is_null(), "{t:#}");
    let message = t["exception_info"]["exception_message"].as_str().unwrap();
    assert!(message.contains("`RUN --mount` step"), "{message}");
    assert!(message.contains(&format!("podman {version}")), "{message}");
    assert!(!marker.exists(), "the build reached the host");
}

/// Red team round 33 (medium): an offline task's image build had the runtime's network (its
/// `RUN` steps reached a host listener through podman's bridge). Its `RUN` steps see only a
/// loopback now, as its setup phase does under bwrap.
#[test]
fn an_offline_tasks_build_has_no_network() {
    let Some(p) = podman() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    // Built afresh each run: a cached image would say nothing.
    let nonce = std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos();
    let dockerfile = format!(
        "FROM {BASE}\nRUN echo {nonce} > /nonce; ls /sys/class/net > /interfaces && \
         test \"$(cat /interfaces)\" = lo\n"
    );
    let dir = task(
        root.path(),
        "offline-build",
        &dockerfile,
        "echo 42 > /app/answer.txt\n",
        "true",
    );
    let out = tempfile::tempdir().unwrap();
    let job = eval(
        p,
        out.path(),
        &[
            dir.to_str().unwrap(),
            "--agent",
            "oracle",
            "--env",
            "podman",
        ],
        &[],
    );
    let t = &trials(&job)[0];
    assert_eq!(t["reward"], 1.0, "{t:#}");
}
