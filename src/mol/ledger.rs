//! The handoff ledger: what an expert's task actually did, built by baton from the task's own
//! tool calls and results, shown to the other experts next to the task's summary.
//!
//! A summary is the model's account, written in at most 192 tokens by an expert that may leave
//! out the one value or path the next expert needs. The ledger is not written by a model: the
//! files the task changed (and whether a commit followed), the commands it ran with their exit
//! status, the tests it ran last and which of them failed, the plan items still open, the
//! short values it wrote, and the constraints the user stated. It never quotes the expert's
//! answer: another expert sees a task through its summary, never its raw text. It is
//! deterministic (the same task gives the same bytes, so views stay append-only for prefix
//! caches) and bounded. Only tasks that called tools get one: a chat answer's facts are the
//! summary's job.

use std::collections::HashMap;

use serde_json::Value;

use crate::mol::compact::{files_touched, latest_plan};
use crate::mol::timeline::Task;
use crate::protocol::{Role, ToolCall};

/// The most characters of a ledger (about 450 tokens).
pub const LEDGER_MAX_CHARS: usize = 1600;
/// Commands listed, the most recent ones.
const MAX_COMMANDS: usize = 6;
/// Characters of one command as listed.
const COMMAND_CHARS: usize = 100;
/// A write or edit whose new text is at most this long (one line) is listed with its text.
const VALUE_CHARS: usize = 120;
/// Short writes listed, the most recent ones.
const MAX_VALUES: usize = 4;
/// Failing test names listed.
const MAX_FAILING: usize = 5;

/// Words that make a sentence of the user's request a standing constraint.
const CONSTRAINT_WORDS: [&str; 8] = [
    "do not", "don't", "never", "always", "must", "only", "without", "keep",
];

/// One command the task ran and how it ended.
struct Ran {
    command: String,
    exit: Option<i32>,
    output: String,
}

/// The ledger of `task`, or an empty string when it called no tools.
pub fn ledger(task: &Task) -> String {
    let calls: Vec<&ToolCall> = task
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| m.tool_calls.iter())
        .collect();
    if calls.is_empty() {
        return String::new();
    }
    let results: HashMap<&str, &str> = task
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| Some((m.tool_call_id.as_deref()?, m.content.as_str())))
        .collect();
    let mut lines = vec![format!(
        "Ledger (baton's own record of what the {} expert's task did):",
        task.owner
    )];
    let files = files_touched(task);
    if !files.is_empty() {
        let committed = committed_files(&calls, &results);
        let (done, open): (Vec<&String>, Vec<&String>) =
            files.iter().partition(|f| committed.contains(f));
        let mut parts = Vec::new();
        if !open.is_empty() {
            parts.push(format!("{} (not committed)", join(&open)));
        }
        if !done.is_empty() {
            parts.push(format!("{} (committed)", join(&done)));
        }
        lines.push(format!("- files changed: {}", parts.join("; ")));
    }
    let values = short_values(&calls, &results);
    if !values.is_empty() {
        lines.push(format!("- values written: {}", values.join("; ")));
    }
    let ran = commands(&calls, &results);
    if !ran.is_empty() {
        let listed: Vec<String> = ran
            .iter()
            .skip(ran.len().saturating_sub(MAX_COMMANDS))
            .map(|r| {
                format!(
                    "`{}` → {}",
                    clip(&one_line(&r.command), COMMAND_CHARS),
                    exit_text(r.exit)
                )
            })
            .collect();
        let more = ran.len().saturating_sub(MAX_COMMANDS);
        let earlier = if more > 0 {
            format!(" ({more} earlier not listed)")
        } else {
            String::new()
        };
        lines.push(format!("- commands{earlier}: {}", listed.join("; ")));
        if let Some(test) = ran.iter().rev().find(|r| is_test_command(&r.command)) {
            let failing = failing_tests(&test.output);
            let verdict = match test.exit {
                Some(0) => "passed".to_string(),
                Some(code) => format!("failed (exit {code})"),
                None => "did not finish".to_string(),
            };
            let names = if failing.is_empty() {
                String::new()
            } else {
                format!("; failing: {}", failing.join(", "))
            };
            lines.push(format!(
                "- tests last run: `{}` {verdict}{names}",
                clip(&one_line(&test.command), COMMAND_CHARS)
            ));
        }
    }
    if let Some(open) = open_plan_items(task) {
        lines.push(format!("- plan, still open: {open}"));
    }
    let constraints = constraints(&task.user_text);
    if !constraints.is_empty() {
        lines.push(format!("- user's constraints: {}", constraints.join(" / ")));
    }
    if lines.len() == 1 {
        return String::new();
    }
    clip(&lines.join("\n"), LEDGER_MAX_CHARS)
}

/// Files a successful commit covered: everything changed before the last commit that
/// succeeded (the `git` tool's `commit`, or a shell command with `git commit` that exited 0).
fn committed_files(calls: &[&ToolCall], results: &HashMap<&str, &str>) -> Vec<String> {
    let mut committed = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    for call in calls {
        let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        let result = results.get(call.id.as_str()).copied().unwrap_or("");
        match call.name.as_str() {
            "write_file" | "edit" | "apply_patch" => {
                let one = Task {
                    messages: vec![crate::protocol::ChatMessage {
                        tool_calls: vec![(*call).clone()],
                        ..crate::protocol::ChatMessage::assistant("")
                    }],
                    ..empty_task()
                };
                pending.extend(files_touched(&one));
            }
            "git"
                if args.get("action").and_then(Value::as_str) == Some("commit")
                    && result.contains("committed") =>
            {
                committed.append(&mut pending);
            }
            "shell"
                if args
                    .get("command")
                    .and_then(Value::as_str)
                    .is_some_and(|c| c.contains("git commit"))
                    && exit_code(result) == Some(0) =>
            {
                committed.append(&mut pending);
            }
            _ => {}
        }
    }
    committed
}

fn empty_task() -> Task {
    Task {
        id: 0,
        owner: crate::protocol::Expert::L2,
        user_text: String::new(),
        messages: Vec::new(),
        closed: true,
        summary: crate::mol::timeline::SummaryState::Skipped,
        compaction: None,
        shrunk_before: 0,
    }
}

/// The short texts the task wrote that took effect (`write_file` content or an `edit`'s
/// new text of one line, at most `VALUE_CHARS`), as `path: `text``, the most recent last:
/// the exact value a later expert would otherwise have to re-read a file to learn.
fn short_values(calls: &[&ToolCall], results: &HashMap<&str, &str>) -> Vec<String> {
    let mut values: Vec<String> = calls
        .iter()
        .filter(|c| {
            let result = results.get(c.id.as_str()).copied().unwrap_or("");
            !result.starts_with("error")
        })
        .filter_map(|c| {
            let args: Value = serde_json::from_str(&c.arguments).ok()?;
            let text = match c.name.as_str() {
                "write_file" => args.get("content")?.as_str()?,
                "edit" => args.get("new_string")?.as_str()?,
                _ => return None,
            };
            let text = text.trim();
            let path = args.get("path")?.as_str()?;
            (!text.is_empty() && !text.contains('\n') && text.chars().count() <= VALUE_CHARS)
                .then(|| format!("{}: `{text}`", clip(path, 100)))
        })
        .collect();
    values.drain(..values.len().saturating_sub(MAX_VALUES));
    values
}

/// The shell commands of the task, in order, with their exit status and output.
fn commands(calls: &[&ToolCall], results: &HashMap<&str, &str>) -> Vec<Ran> {
    calls
        .iter()
        .filter(|c| c.name == "shell")
        .filter_map(|c| {
            let args: Value = serde_json::from_str(&c.arguments).ok()?;
            let command = args.get("command")?.as_str()?.to_string();
            let output = results.get(c.id.as_str()).copied().unwrap_or("");
            Some(Ran {
                command,
                exit: exit_code(output),
                output: output.to_string(),
            })
        })
        .collect()
}

/// The exit status the shell tool reports on its result's last line (`[exit code N]`).
fn exit_code(result: &str) -> Option<i32> {
    let last = result.trim_end().lines().last()?;
    let rest = last.trim().strip_prefix("[exit code ")?;
    rest.split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .next()?
        .parse()
        .ok()
}

fn exit_text(exit: Option<i32>) -> String {
    match exit {
        Some(code) => format!("exit {code}"),
        None => "no exit status".into(),
    }
}

/// Whether a command runs tests (the common runners; `test` as a word of it).
fn is_test_command(command: &str) -> bool {
    command
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .any(|w| {
            matches!(
                w,
                "test" | "tests" | "pytest" | "unittest" | "jest" | "vitest" | "nextest" | "ctest"
            )
        })
}

/// Names of failing tests in a runner's output: unittest (`FAIL: name (…)`, `ERROR: …`),
/// pytest (`FAILED path::name`), cargo (`test name ... FAILED`), go (`--- FAIL: Name`).
fn failing_tests(output: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in output.lines() {
        let line = line.trim();
        let name = if let Some(rest) = line
            .strip_prefix("FAIL: ")
            .or_else(|| line.strip_prefix("ERROR: "))
            .or_else(|| line.strip_prefix("FAILED "))
            .or_else(|| line.strip_prefix("--- FAIL: "))
        {
            rest.split_whitespace().next()
        } else if let Some(rest) = line.strip_prefix("test ") {
            rest.strip_suffix(" ... FAILED")
                .or_else(|| rest.strip_suffix(" ... FAIL"))
        } else {
            None
        };
        if let Some(name) = name
            .map(|n| n.trim_end_matches(':'))
            .filter(|n| !n.is_empty())
            && !names.iter().any(|n| n == name)
        {
            names.push(clip(name, 120));
            if names.len() == MAX_FAILING {
                break;
            }
        }
    }
    names
}

/// The latest plan's steps that are not completed, `step (in progress)` first.
fn open_plan_items(task: &Task) -> Option<String> {
    let plan: Value = serde_json::from_str(&latest_plan(&task.messages)?).ok()?;
    let open: Vec<String> = plan
        .get("plan")?
        .as_array()?
        .iter()
        .filter_map(|item| {
            let step = item.get("step")?.as_str()?;
            match item.get("status").and_then(Value::as_str) {
                Some("completed") => None,
                Some("in_progress") => Some(format!("{} (in progress)", clip(step, 100))),
                _ => Some(clip(step, 100)),
            }
        })
        .collect();
    (!open.is_empty()).then(|| open.join("; "))
}

/// Sentences of the user's request that state a constraint (at most two).
fn constraints(user_text: &str) -> Vec<String> {
    // Only the request itself: a piped block is material, not instructions.
    let request = user_text.split("<stdin>").next().unwrap_or("");
    request
        .split(['.', '!', '?', '\n'])
        .map(str::trim)
        .filter(|s| {
            let lower = s.to_lowercase();
            CONSTRAINT_WORDS.iter().any(|w| {
                lower
                    .match_indices(w)
                    .any(|(i, _)| i == 0 || !lower.as_bytes()[i - 1].is_ascii_alphanumeric())
            })
        })
        .take(2)
        .map(|s| format!("\"{}\"", clip(s, 160)))
        .collect()
}

fn join(files: &[&String]) -> String {
    files
        .iter()
        .map(|f| f.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters, with `…` when cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ChatMessage, Expert};

    fn call(id: &str, name: &str, args: &str) -> ChatMessage {
        let mut m = ChatMessage::assistant("");
        m.tool_calls.push(ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args.into(),
        });
        m
    }

    fn task(messages: Vec<ChatMessage>) -> Task {
        Task {
            owner: Expert::L2,
            user_text: "Fix the rate. Do not touch the API module.".into(),
            messages,
            ..empty_task()
        }
    }

    #[test]
    fn the_ledger_records_what_the_task_did() {
        let t = task(vec![
            call(
                "1",
                "write_file",
                r#"{"path":"src/rate.py","content":"RATE = 0.0725\n"}"#,
            ),
            ChatMessage::tool_result("1", "Wrote src/rate.py"),
            call("2", "shell", r#"{"command":"python3 -m unittest -q"}"#),
            ChatMessage::tool_result(
                "2",
                "FAIL: test_rate_rounding (test_rate.T.test_rate_rounding)\nFAILED (failures=1)\n[exit code 1]",
            ),
            call("3", "git", r#"{"action":"commit","message":"rate"}"#),
            ChatMessage::tool_result("3", "[main] committed a735795dcb: rate"),
            call(
                "4",
                "edit",
                r#"{"path":"NOTES.md","old_string":"a","new_string":"b"}"#,
            ),
            ChatMessage::tool_result("4", "Edited NOTES.md"),
            call(
                "5",
                "update_plan",
                r#"{"plan":[{"step":"fix","status":"completed"},{"step":"round half up","status":"in_progress"}]}"#,
            ),
            ChatMessage::tool_result("5", "Plan updated"),
            ChatMessage::assistant("The rate is now 0.0725; test_rate_rounding still fails."),
        ]);
        let l = ledger(&t);
        assert!(l.starts_with("Ledger (baton's own record of what the L2 expert's task did):"));
        assert!(!l.contains("still fails"), "the answer is not quoted: {l}");
        assert!(
            l.contains("- values written: src/rate.py: `RATE = 0.0725`"),
            "{l}"
        );
        assert!(
            l.contains("- files changed: NOTES.md (not committed); src/rate.py (committed)"),
            "{l}"
        );
        assert!(
            l.contains("- commands: `python3 -m unittest -q` → exit 1"),
            "{l}"
        );
        assert!(
            l.contains("- tests last run: `python3 -m unittest -q` failed (exit 1); failing: test_rate_rounding"),
            "{l}"
        );
        assert!(
            l.contains("- plan, still open: round half up (in progress)"),
            "{l}"
        );
        assert!(
            l.contains("- user's constraints: \"Do not touch the API module\""),
            "{l}"
        );
        assert!(l.len() <= LEDGER_MAX_CHARS * 4);
        // Deterministic: the same task, the same bytes.
        assert_eq!(l, ledger(&t));
    }

    #[test]
    fn a_task_without_tool_calls_has_no_ledger() {
        assert_eq!(ledger(&task(vec![ChatMessage::assistant("Hello.")])), "");
    }

    #[test]
    fn failing_test_names_of_common_runners() {
        let out = "FAILED tests/test_a.py::test_one - assert 1 == 2\n\
                   test parse::rejects_empty ... FAILED\n\
                   --- FAIL: TestRound (0.00s)\n\
                   ERROR: test_io (t.T)\n";
        assert_eq!(
            failing_tests(out),
            vec![
                "tests/test_a.py::test_one",
                "parse::rejects_empty",
                "TestRound",
                "test_io"
            ]
        );
        assert_eq!(exit_code("x\n[exit code 3]\n"), Some(3));
        assert_eq!(exit_code("x"), None);
        assert!(is_test_command("cargo test -q") && is_test_command("python3 -m pytest"));
        assert!(!is_test_command("ls attestation"));
    }
}
