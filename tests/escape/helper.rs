//! The sandbox's inner helper as a target: bubblewrap execs it inside every command's world and
//! it is what applies Landlock, no_new_privs and seccomp, so a command that could put its own
//! program where baton looks for the helper would have the next command run unconfined. That
//! is possible whenever baton itself runs from a folder the sandbox may write (a developer's
//! `target/debug/baton` inside the workspace).

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, Script};

/// Writes `bin/baton-sandbox-inner`: a program that applies nothing, it drops
/// `__sandbox-inner SPEC --` and runs the command as it is.
const PLANT: &str = "printf '#!/bin/sh\\nshift 3\\nexec \"$@\"\\n' > bin/baton-sandbox-inner && \
                     chmod +x bin/baton-sandbox-inner";

/// Puts a copy of the baton binary (alone, as `cp target/release/baton ~/bin` would) in
/// `dir`, which lies in the workspace.
fn baton_in(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    let from = assert_cmd::cargo::cargo_bin("baton");
    let to = dir.join("baton");
    // Not linked (another user's binary, as for nobody): copied by `cp`, never by this
    // process (ETXTBSY, see `copy_program`).
    if std::fs::hard_link(&from, &to).is_err() {
        crate::support::env::copy_program(&from, &to);
    }
    to
}

/// What `/proc/self/status` says of the command's confinement, one `Name: value` a line.
const SHOW_CONFINEMENT: &str = "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status";

fn assert_confined(out: &str, what: &str) {
    assert!(
        out.contains("Seccomp:\t2") && out.contains("NoNewPrivs:\t1"),
        "{what} ran without its seccomp filter / no_new_privs:\n{out}"
    );
}

/// One session of a baton that runs from `bin/` inside its own workspace: the model's first
/// command writes `bin/baton-sandbox-inner` (where baton looks for its helper first), the
/// second shows whether it still runs under seccomp and no_new_privs.
#[test]
fn a_command_cannot_plant_the_sandbox_helper_beside_a_baton_in_the_workspace() {
    if !crate::support::external::sandbox_enforceable("helper escape test") {
        return;
    }
    let env = Env::new();
    let baton = baton_in(&env.workspace.join("bin"));
    let plant = format!("{PLANT}; ls -l bin");
    let script = Script::new()
        .route("L2")
        .answer(
            "L2",
            MockReply::tool_call("call_0", "shell", json!({ "command": plant }).to_string()),
        )
        .answer(
            "L2",
            MockReply::tool_call(
                "call_1",
                "shell",
                json!({ "command": SHOW_CONFINEMENT }).to_string(),
            ),
        )
        .answer("L2", "done.");
    let engine = MockEngine::scripted_blocking(script);
    let out = Command::new(&baton)
        .env_clear()
        .env("HOME", &env.home)
        .env("XDG_CONFIG_HOME", env.home.join(".config"))
        .env("XDG_DATA_HOME", env.home.join(".local/share"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(&env.workspace)
        .arg("--session-dir")
        .arg(&env.sessions)
        .args(["--exec", "--endpoint", &engine.url(), "--json"])
        .args([
            "--sandbox",
            "workspace-write",
            "--ask-for-approval",
            "full-auto",
        ])
        .arg("look around")
        .output()
        .expect("run baton");
    let ends: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_end")
        .collect();
    assert_eq!(ends.len(), 2, "both commands ran: {out:?}");
    let second = ends[1]["output"].as_str().unwrap_or_default();
    assert_confined(second, "the command after the plant");
}

/// The same through `baton sandbox`: one run plants the helper beside the baton it was started
/// from, the next run of that baton must still confine its command.
#[test]
fn baton_sandbox_ignores_a_helper_planted_beside_it() {
    if !crate::support::external::sandbox_enforceable("helper escape test") {
        return;
    }
    let env = Env::new();
    let baton = baton_in(&env.workspace.join("bin"));
    let sandbox = |cmd: &str| {
        Command::new(&baton)
            .env_clear()
            .env("HOME", &env.home)
            .env("XDG_CONFIG_HOME", env.home.join(".config"))
            .env("XDG_DATA_HOME", env.home.join(".local/share"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&env.workspace)
            .args([
                "sandbox",
                "--sandbox",
                "workspace-write",
                "--",
                "sh",
                "-c",
                cmd,
            ])
            .output()
            .expect("run baton sandbox")
    };
    let planted = sandbox(PLANT);
    assert!(
        planted.status.success(),
        "the workspace is writable: {planted:?}"
    );
    let shown = sandbox(SHOW_CONFINEMENT);
    assert_confined(
        &String::from_utf8_lossy(&shown.stdout),
        "the next `baton sandbox` command",
    );
    // Renaming the folder the helper sits in (it is bound read-only onto itself, but its
    // parent is a plain folder of the workspace) and laying out a new one must not work either.
    let swapped = sandbox(&format!(
        "rm bin/baton-sandbox-inner; mv bin bin.old && mkdir bin && \
         {{ ln bin.old/baton bin/baton || cp bin.old/baton bin/baton; }} && {PLANT}"
    ));
    assert!(
        swapped.status.success(),
        "the folder was swapped: {swapped:?}"
    );
    let shown = sandbox(SHOW_CONFINEMENT);
    assert_confined(
        &String::from_utf8_lossy(&shown.stdout),
        "a command after the helper's folder was swapped",
    );
}
