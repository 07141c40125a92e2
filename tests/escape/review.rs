//! Escape tests found by a hostile review of the bubblewrap design: neighbours of the attacks
//! the other files cover, each played for real through the binary.

use serde_json::{Value, json};

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, Script};

fn sandbox_flag() -> &'static str {
    if baton::sandbox::probe().enforceable {
        "workspace-write"
    } else {
        "off"
    }
}

/// Runs the scripted shell commands through `baton --exec --json` (approval policy `never`,
/// so only what the safe list vouches for runs) and returns every `tool_end`.
fn run_commands(env: &Env, commands: &[String]) -> Vec<Value> {
    let calls = commands
        .iter()
        .map(|command| ("shell", json!({ "command": command })))
        .collect();
    super::approval::run_calls(env, calls, &["--ask-for-approval", "never"])
}

/// bash evaluates an array subscript in a variable name it is handed, and a `$(…)` in that
/// subscript runs: `printf -v 'a[$(cmd)]'`, `test -v 'a[$(cmd)]'` and `[ -v … ]` run `cmd`
/// although every word is a single-quoted literal.
#[test]
fn safe_listed_builtins_cannot_run_code_through_an_array_subscript() {
    let env = Env::new();
    let mut commands = Vec::new();
    let mut markers = Vec::new();
    for (i, template) in [
        "printf -v 'x[$(touch {M})]' %s 1",
        "test -v 'x[$(touch {M})]'",
        "[ -v 'x[$(touch {M})]' ]",
        "printf -v 'x[`touch {M}`]' %s 1",
        "echo -v; printf $_ 'x[$(touch {M})]' %s 1",
        "printf -vx'[$(touch {M})]' %s 1",
    ]
    .iter()
    .enumerate()
    {
        let marker = env.workspace.join(format!("pwned-by-subscript-{i}"));
        commands.push(template.replace("{M}", &marker.display().to_string()));
        markers.push(marker);
    }
    let ends = run_commands(&env, &commands);
    assert_eq!(ends.len(), commands.len(), "every call ended: {ends:?}");
    for (command, marker) in commands.iter().zip(&markers) {
        assert!(
            !marker.exists(),
            "`{command}` ran code without approval: {ends:?}"
        );
    }
}

/// The audit of git configs runs where a shell command ends; a command left running in a
/// session (it yielded) and killed when baton exits must be audited too, or what it planted
/// in a repository nothing could pin (a fresh `git init` in a subfolder) stays armed for the
/// user's next `git status` there.
#[test]
fn a_yielded_command_killed_at_exit_is_still_audited() {
    let env = Env::new();
    let marker = env.workspace.join("pwned-by-fsmonitor");
    let command = format!(
        "git init -q sub && git -C sub config core.fsmonitor 'touch {}' && sleep 600",
        marker.display()
    );
    let script = Script::new().route("L2").answer(
        "L2",
        MockReply::tool_call(
            "call_0",
            "shell",
            json!({ "command": command, "yield_ms": 1500 }).to_string(),
        ),
    );
    let engine = MockEngine::scripted_blocking(script.answer("L2", "done."));
    let out = env
        .exec(
            &engine,
            "look around",
            &[
                "--json",
                "--sandbox",
                sandbox_flag(),
                "--ask-for-approval",
                "full-auto",
            ],
        )
        .output()
        .expect("run baton");
    let config = env.workspace.join("sub/.git/config");
    assert!(config.exists(), "the command ran: {out:?}");
    let text = std::fs::read_to_string(&config).expect("read config");
    let armed = std::process::Command::new("git")
        .args(["config", "--file"])
        .arg(&config)
        .args(["--get", "core.fsmonitor"])
        .output()
        .expect("git config");
    assert!(
        !armed.status.success(),
        "core.fsmonitor planted by a yielded command survived baton's exit:\n{text}"
    );
}

/// git takes a folder that *is* a git directory (`HEAD`, `objects/`, `refs/`, `config`) as a
/// repository when it runs there, with no `.git` anywhere: a command that lays one out in the
/// workspace, with `core.bare = false`, a work tree and `core.fsmonitor`, gets code run by
/// the user's next `git status` in that folder, outside the sandbox.
#[test]
fn a_planted_bare_git_directory_is_audited_like_a_dot_git() {
    let env = Env::new();
    let marker = env.workspace.join("pwned-by-bare-gitdir");
    let mut commands = Vec::new();
    let mut folders = Vec::new();
    for dir in ["", "vendor"] {
        let folder = if dir.is_empty() {
            env.workspace.clone()
        } else {
            env.workspace.join(dir)
        };
        commands.push(format!(
            "mkdir -p '{f}' && cd '{f}' && git init -q --bare . && git config core.bare false \
             && git config core.worktree '{f}' && git config core.fsmonitor 'touch {m}; false'",
            f = folder.display(),
            m = marker.display()
        ));
        folders.push(folder);
    }
    let calls = commands
        .iter()
        .map(|command| ("shell", json!({ "command": command })))
        .collect();
    let out = super::approval::run_calls(&env, calls, &["--ask-for-approval", "full-auto"]);
    assert!(
        env.workspace.join("vendor/HEAD").exists(),
        "the commands ran: {out:?}"
    );
    for folder in &folders {
        // The user's own `git status` there, after baton is gone.
        let _ = std::process::Command::new("git")
            .arg("status")
            .current_dir(folder)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output();
        assert!(
            !marker.exists(),
            "git status in {} ran the planted core.fsmonitor",
            folder.display()
        );
    }
}

/// Credentials whose names the first patterns missed: `sshpass -e` reads `SSHPASS`, CI
/// systems hand jobs an identity token as `CI_JOB_JWT`, and a Slack or Discord webhook URL
/// is itself the credential.
#[test]
fn baton_sandbox_scrubs_sshpass_jwts_and_webhook_urls() {
    let env = Env::new();
    let secrets = [
        ("SSHPASS", "hunter2-sshpass"),
        ("CI_JOB_JWT", "hunter2-jwt"),
        ("CI_JOB_JWT_V2", "hunter2-jwt2"),
        (
            "SLACK_WEBHOOK_URL",
            "https://hooks.slack.com/services/T/B/hunter2",
        ),
    ];
    let mut cmd = env.session_baton();
    cmd.args(["sandbox", "--sandbox", sandbox_flag(), "--", "env"]);
    for (k, v) in secrets {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run baton sandbox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "env ran: {out:?}");
    for (k, v) in secrets {
        assert!(!stdout.contains(v), "{k} reached the command:\n{stdout}");
    }
}

/// The file tools' side of the bare git directory: `write_file` lays out `HEAD`, `config`
/// (with a work tree and `core.fsmonitor`), `objects/` and `refs/` in a folder; the user's
/// next `git status` there runs the planted command outside the sandbox.
#[test]
fn write_file_cannot_lay_out_a_bare_git_directory() {
    let env = Env::new();
    let marker = env.workspace.join("pwned-by-written-gitdir");
    let vendor = env.workspace.join("vendor");
    let config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {}\n\tfsmonitor = touch {}; false\n",
        vendor.display(),
        marker.display()
    );
    let files = [
        ("vendor/objects/info/keep", ""),
        ("vendor/refs/heads/keep", ""),
        ("vendor/HEAD", "ref: refs/heads/main\n"),
        ("vendor/config", config.as_str()),
    ];
    let calls = files
        .iter()
        .map(|(path, content)| ("write_file", json!({ "path": path, "content": content })))
        .collect();
    let out = super::approval::run_calls(&env, calls, &["--ask-for-approval", "auto-edit"]);
    assert!(
        vendor.join("objects/info/keep").exists(),
        "the tools ran: {out:?}"
    );
    let _ = std::process::Command::new("git")
        .arg("status")
        .current_dir(&vendor)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output();
    assert!(
        !marker.exists(),
        "git status in vendor/ ran a core.fsmonitor written by write_file"
    );
}

/// A process whose leader thread ends with `exit(2)` while another thread goes on shows as a
/// zombie (`Z`) in `/proc/PID/stat`; a kill-all that skips zombies to save the wait for exiting
/// members leaves it running after the command has ended, free to write the workspace long
/// after baton reported the command done (the landlock backend has no pid namespace whose
/// end would take it along).
#[test]
fn a_process_posing_as_a_zombie_does_not_outlive_its_command() {
    // A system Python: one under the home folder (pyenv) is hidden inside the sandbox.
    let Some(python) = crate::support::external::require(
        "python3 in /usr/bin or /usr/local/bin",
        ["/usr/bin/python3", "/usr/local/bin/python3"]
            .into_iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.is_file()),
    ) else {
        return;
    };
    if !crate::support::external::sandbox_enforceable("zombie test") {
        return;
    }
    let script = "import os, threading, time, ctypes\n\
                  if os.fork() == 0:\n    \
                      def late():\n        \
                          time.sleep(3)\n        \
                          open('survived', 'w').write('x')\n    \
                      threading.Thread(target=late).start()\n    \
                      time.sleep(0.3)\n    \
                      ctypes.CDLL(None).syscall(ctypes.c_long(60), 0)\n\
                  else:\n    \
                      time.sleep(0.6)\n";
    if !cfg!(target_arch = "x86_64") {
        // 60 is SYS_exit on x86_64 only.
        return;
    }
    // Without a pids cgroup (an unprivileged user on a host that delegates none) the landlock
    // backend has nothing to find a command's leftovers by; docs/sandbox.md says so.
    let cgroup = baton::sandbox::probe().process_bound.contains("cgroup");
    for backend in ["landlock", "bubblewrap"] {
        if backend == "landlock" && !cgroup {
            eprintln!("no pids cgroup here: the landlock backend's kill-all is not checked");
            continue;
        }
        let env = Env::new();
        let out = env
            .session_baton()
            .args([
                "sandbox",
                "--sandbox",
                "workspace-write",
                "--sandbox-backend",
                backend,
            ])
            .arg("--")
            .arg(&python)
            .args(["-c", script])
            .output()
            .expect("run baton sandbox");
        assert!(out.status.success(), "{backend}: {out:?}");
        std::thread::sleep(std::time::Duration::from_secs(4));
        assert!(
            !env.workspace.join("survived").exists(),
            "{backend}: a thread of a process whose leader had exited outlived the command"
        );
    }
}

/// With `--sandbox off` (a Harbor trial, say) or the landlock backend there is no pid
/// namespace: a command of the model's running as the user can read
/// `/proc/<baton's pid>/environ`, which still holds the API key baton was started with,
/// although the command's own environment was scrubbed of it.
#[test]
fn a_command_cannot_read_the_api_key_from_batons_environ() {
    // SAFETY: geteuid has no failure modes.
    if unsafe { libc::geteuid() } == 0 {
        // Root (with CAP_SYS_PTRACE) reads every process's memory; only the sandbox's pid
        // namespace hides baton from it.
        eprintln!("run as root: baton's environ is readable by root's commands by design");
        return;
    }
    let key = "sk-environ-probe-31337";
    let probe = format!(
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null | grep -c {key}; true"
    );
    let mut backends = vec![("off", "bubblewrap")];
    if baton::sandbox::probe::probe_backend(baton::sandbox::Backend::Landlock).enforceable {
        backends.push(("workspace-write", "landlock"));
    }
    for (mode, backend) in backends {
        let env = Env::new();
        let engine = MockEngine::scripted_blocking(
            Script::new()
                .route("L2")
                .answer(
                    "L2",
                    MockReply::tool_call("c1", "shell", json!({ "command": probe }).to_string()),
                )
                .answer("L2", "done."),
        );
        let out = env
            .exec(
                &engine,
                "look around",
                &[
                    "--json",
                    "--sandbox",
                    mode,
                    "--sandbox-backend",
                    backend,
                    "--ask-for-approval",
                    "full-auto",
                ],
            )
            .env("BATON_API_KEY", key)
            .output()
            .expect("run baton");
        let ends: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["type"] == "tool_end")
            .collect();
        assert_eq!(ends.len(), 1, "{mode}/{backend}: the probe ran: {out:?}");
        let output = ends[0]["output"].as_str().unwrap_or_default();
        assert!(
            output.trim_start().starts_with('0'),
            "{mode}/{backend}: the command found the API key in a process's environ:\n{output}"
        );
    }
}

/// A cloned repository ships a harmless skill; the model's command swaps its `SKILL.md` for a
/// link to a file the sandbox hides (`~/.ssh/…`), then the model calls the skill tool, which
/// reads in baton's own process, outside the sandbox: the link was checked only when the
/// session started.
#[test]
fn a_skill_swapped_for_a_link_after_start_up_does_not_read_outside() {
    let env = Env::new();
    let secret = env.home.join(".ssh/id_test");
    std::fs::create_dir_all(secret.parent().expect("parent")).expect("mkdir");
    std::fs::write(&secret, "PRIVATE-KEY-MATERIAL-4242\n").expect("write secret");
    let skill = env.workspace.join(".agents/skills/notes");
    std::fs::create_dir_all(&skill).expect("mkdir");
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: notes\ndescription: How to take notes\n---\nWrite short notes.\n",
    )
    .expect("write skill");
    let swap = format!(
        "ln -sf {} .agents/skills/notes/SKILL.md; ls -l .agents/skills/notes",
        secret.display()
    );
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("c1", "shell", json!({ "command": swap }).to_string()),
            )
            .answer(
                "L2",
                MockReply::tool_call("c2", "skill", json!({ "name": "notes" }).to_string()),
            )
            .answer("L2", "done."),
    );
    let out = env
        .exec(
            &engine,
            "take notes",
            &[
                "--json",
                "--sandbox",
                sandbox_flag(),
                "--ask-for-approval",
                "full-auto",
            ],
        )
        .output()
        .expect("run baton");
    let ends: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_end")
        .collect();
    assert_eq!(ends.len(), 2, "both calls ran: {out:?}");
    assert!(
        std::fs::symlink_metadata(skill.join("SKILL.md")).is_ok_and(|m| m.file_type().is_symlink()),
        "the command swapped the skill for a link: {}",
        ends[0]
    );
    let shown = ends[1].to_string();
    assert!(
        !shown.contains("PRIVATE-KEY-MATERIAL"),
        "the skill tool read a file outside the workspace through a swapped link: {shown}"
    );
    for r in engine.requests() {
        assert!(
            !r.raw_body.contains("PRIVATE-KEY-MATERIAL"),
            "the secret reached the model"
        );
    }
}
