//! Escape tests for escape sequences that model- or command-controlled text tries to send to the user's terminal.
//!
//! The attacker is the model (or a file it quotes): its answer, a tool call's title, a path it
//! names and the error text those produce carry OSC 52 (write the clipboard), OSC 0 (the
//! window title), screen clears and cursor moves, a DCS query, DEL, an 8-bit CSI and a bidi
//! override. Whatever baton prints outside the live UI — `--exec` plain output on stdout and
//! stderr, the transcript printed when the UI exits — must hold none of them.

use std::path::PathBuf;
use std::time::Instant;

use baton::protocol::{ErrorKind, Event, Expert, ToolStatus};
use baton::tui::{App, ColorDepth, TuiOptions};
use serde_json::json;

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, Script};

/// Everything a terminal might act on, between words that must still be shown.
const HOSTILE: &str = "\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[H\
                       \u{1b}P+q544e\u{1b}\\\u{7f}\u{9b}31m\u{202e}\u{1b}c";

/// Up to 40 characters before the `at`-th character of `text` and 10 from it.
fn around(text: &str, at: usize) -> String {
    text.chars().skip(at.saturating_sub(40)).take(50).collect()
}

/// The bytes a terminal could act on, described, or `None` when there are none.
fn active_bytes(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    for (n, c) in text.chars().enumerate() {
        // Bidi overrides and isolates: the ones HOSTILE carries, and their kin.
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        let bad = (c.is_control() && c != '\n' && c != '\t') || bidi;
        if bad {
            return Some(format!("{c:?} at character {n}: …{:?}…", around(&text, n)));
        }
    }
    None
}

/// `active_bytes`, and the payload of a sequence must not be left behind as text either.
fn active_bytes_or_payload(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    for payload in ["52;c;", "ZXZpbA==", "0;pwned"] {
        if let Some(at) = text.find(payload) {
            let n = text[..at].chars().count();
            return Some(format!(
                "a sequence's payload was left in: …{:?}…",
                around(&text, n)
            ));
        }
    }
    active_bytes(bytes)
}

#[test]
fn hostile_escape_sequences_in_the_answer_and_tool_text_never_reach_exec_plain_output() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            // A command that needs approval (declined: --exec never asks), an unknown tool and
            // a missing file:
            // their titles, names and paths reach the `tool:` and error lines.
            .answer(
                "L2",
                MockReply::tool_call(
                    "c1",
                    "shell",
                    json!({ "command": format!("touch x # {HOSTILE}") }).to_string(),
                ),
            )
            .answer(
                "L2",
                MockReply::tool_call("c2", format!("evil{HOSTILE}"), "{}".to_string()),
            )
            .answer(
                "L2",
                MockReply::tool_call(
                    "c3",
                    "read_file",
                    json!({ "path": format!("notes{HOSTILE}.txt") }).to_string(),
                ),
            )
            .answer("L2", format!("Finished{HOSTILE} the work."))
            .default_summary("summary"),
    );
    let out = env.exec(&engine, "go", &[]).output().expect("run baton");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("Finished"), "{stdout}\n{stderr}");
    assert!(stdout.contains("the work."), "{stdout}");
    assert!(stderr.contains("tool: touch x"), "{stderr}");
    assert!(stderr.contains("tool declined: touch x"), "{stderr}");
    assert!(stderr.contains("tool error:"), "{stderr}");
    if let Some(bad) = active_bytes_or_payload(&out.stdout) {
        panic!("stdout: {bad}");
    }
    if let Some(bad) = active_bytes_or_payload(&out.stderr) {
        panic!("stderr: {bad}");
    }

    // A server's error message: the `error:` line.
    let engine = MockEngine::scripted_blocking(Script::new().default_route("L2").answer(
        "L2",
        MockReply::error(500, &format!("overloaded{HOSTILE}"), "server_error"),
    ));
    let out = env.exec(&engine, "go", &[]).output().expect("run baton");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("error:"), "{stderr}");
    if let Some(bad) = active_bytes_or_payload(&out.stderr) {
        panic!("stderr of an error: {bad}");
    }
}

/// The transcript as the UI prints it on exit, after a turn full of hostile text.
fn printed_transcript(depth: ColorDepth) -> Vec<u8> {
    let mut opts = TuiOptions::new(PathBuf::from("/home/dev/project"));
    opts.sandbox = "workspace-write".into();
    opts.approval = "ask".into();
    let mut app = App::with_depth(opts, depth, Instant::now());
    app.handle_event(Event::TurnStarted {
        turn_id: 1,
        text: format!("look at{HOSTILE} this"),
    });
    app.handle_event(Event::ToolBegin {
        turn_id: 1,
        call_id: "c1".into(),
        tool: "shell".into(),
        arguments: json!({ "command": format!("cat x{HOSTILE}") }),
        title: format!("cat x{HOSTILE}"),
    });
    app.handle_event(Event::ToolEnd {
        call_id: "c1".into(),
        status: ToolStatus::Error,
        exit_code: None,
        duration_ms: 3,
        output: format!("cannot read x{HOSTILE}: no such file"),
    });
    app.handle_event(Event::Warning {
        message: format!("odd{HOSTILE} warning"),
    });
    app.handle_event(Event::MessageFinal {
        turn_id: 1,
        expert: Some(Expert::L2),
        text: format!("The answer{HOSTILE}\n\n```\ncode{HOSTILE}\n```\n"),
    });
    app.handle_event(Event::Error {
        message: format!("server said{HOSTILE}"),
        kind: ErrorKind::Server,
        hop: None,
    });
    let mut out = Vec::new();
    baton::tui::print_transcript(&app, 100, &mut out).expect("print");
    out
}

/// Removes the SGR sequences the printer itself writes for colours (`ESC [ … m`).
fn without_own_colours(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == 0x1b && bytes.get(i + 1) == Some(&b'[') {
            let mut j = i + 2;
            while j < bytes.len() && (bytes[j].is_ascii_digit() || bytes[j] == b';') {
                j += 1;
            }
            if bytes.get(j) == Some(&b'm') {
                i = j + 1;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[test]
fn hostile_escape_sequences_never_reach_the_transcript_printed_on_exit() {
    let plain = printed_transcript(ColorDepth::None);
    let text = String::from_utf8_lossy(&plain);
    assert!(
        text.contains("The answer") && text.contains("look at"),
        "{text}"
    );
    // Lines end in CR LF on the way out (the terminal may still be raw).
    let plain: Vec<u8> = plain.into_iter().filter(|b| *b != b'\r').collect();
    if let Some(bad) = active_bytes_or_payload(&plain) {
        panic!("without colours: {bad}");
    }
    let coloured = printed_transcript(ColorDepth::TrueColor);
    let coloured: Vec<u8> = without_own_colours(&coloured)
        .into_iter()
        .filter(|b| *b != b'\r')
        .collect();
    if let Some(bad) = active_bytes(&coloured) {
        panic!("with colours: {bad}");
    }
}

#[test]
fn eight_bit_controls_and_bidi_overrides_never_reach_the_terminal_raw_through_exec_json() {
    // JSON escapes C0 controls only: U+009B (CSI), U+009D (OSC), DEL and U+202E went out as
    // raw characters, which a UTF-8 terminal showing `--exec --json` acts on (or reorders).
    // Written as `\uXXXX` escapes they read the same to a JSON parser and nothing to a
    // terminal.
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "c1",
                    "read_file",
                    json!({ "path": format!("notes{HOSTILE}\u{9d}0;title\u{9c}.txt") }).to_string(),
                ),
            )
            .answer("L2", format!("Finished{HOSTILE} the work."))
            .default_summary("summary"),
    );
    let out = env
        .exec(&engine, "go", &["--json"])
        .output()
        .expect("run baton");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        events.iter().any(|e| e.to_string().contains("Finished")),
        "{stdout}"
    );
    // Nothing is lost: the parsed events still hold the characters.
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "turn_completed" && e.to_string().contains('\u{9b}')),
        "{stdout}"
    );
    if let Some(bad) = active_bytes(&out.stdout) {
        panic!("stdout: {bad}");
    }
}
