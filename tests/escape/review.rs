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
    let mut script = Script::new().route("L2");
    for (i, command) in commands.iter().enumerate() {
        script = script.answer(
            "L2",
            MockReply::tool_call(
                format!("call_{i}"),
                "shell",
                json!({ "command": command }).to_string(),
            ),
        );
    }
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
                "never",
            ],
        )
        .output()
        .expect("run baton");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_end")
        .collect()
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
