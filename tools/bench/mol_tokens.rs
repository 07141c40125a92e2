//! Prompt tokens per MoL hop, for a fixed multi-turn scenario on the mock engine
//! (`cargo test --release --bench mol_tokens`, or in a debug build `cargo test --bench mol_tokens`:
//! the figures count tokens, not time, so the build profile does not change them).
//!
//! Five scenarios run the real `baton --exec` binary (`--approval full-auto --sandbox off`, a
//! fresh temp workspace and session folder each) against the loopback mock engine, which
//! plays the model from a script and records every request:
//! - `l0-question`: a general question routed to L0, answered in one hop;
//! - `l2-coding`: a 10-step L2 coding task (list, read, grep, run the tests, edit, rerun, …);
//! - `l1-l2-handoff`: an L1 planning turn, then (`--resume last`) an L2 turn that continues it;
//! - `stdin-440k`: a 440 KB log piped on stdin with a one-line question;
//! - `read-loop-8k`: L2 pinned with `--context-window 8192` reads seven 8 KB files one by one.
//!
//! Token measure (an estimate, the one of ../shared/reports/model-seat.md): the characters of
//! every message's content, tool-call names and arguments, plus the `tools` JSON, divided by
//! 3.6, plus 4 per message. The mock engine reports that same figure as `usage.prompt_tokens`,
//! so baton's context budget works from it as it would from a real server.
//!
//! Output: one line per hop kind and scenario (requests, total, largest), and per scenario the
//! answer hops' tokens in order. `MOL_TOKENS_BASELINE=/path/to/another/baton` runs the same
//! scenarios against that binary too (e.g. a build of an older commit) and prints both, side by
//! side. `MOL_TOKENS_VERBOSE=1` also prints every request's hop, model and size. For summary and
//! compaction hops it prints how many of their tokens are a prefix shared with the same
//! adapter's previous answer request (identical leading messages and tools): what an engine's
//! prefix cache does not prefill again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[allow(dead_code)]
#[path = "../../tests/support/mock_engine.rs"]
mod mock_engine;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mock_engine::{MockEngine, MockReply, RecordedRequest, Script, content_text};
use serde_json::{Value, json};

/// The token estimate of a request (see the file comment).
fn tokens(req: &RecordedRequest) -> u64 {
    let mut chars = 0usize;
    for m in req.messages() {
        chars += content_text(m).chars().count();
        for call in m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let f = &call["function"];
            chars += f["name"].as_str().map_or(0, |s| s.chars().count());
            chars += f["arguments"].as_str().map_or(0, |s| s.chars().count());
        }
    }
    if let Some(tools) = req.body.get("tools") {
        chars += tools.to_string().chars().count();
    }
    (chars as f64 / 3.6).round() as u64 + 4 * req.messages().len() as u64
}

/// The tokens a request shares, as a prefix, with `before` (the same model's previous answer
/// request): its leading messages that are identical, and the tools when they are the same.
/// With templates that render tools in the system block (GLM, Qwen) different tools share
/// nothing, so then the count is 0.
fn shared_prefix(req: &RecordedRequest, before: &RecordedRequest) -> u64 {
    if req.body.get("tools") != before.body.get("tools") {
        return 0;
    }
    let n = req
        .messages()
        .iter()
        .zip(before.messages())
        .take_while(|(a, b)| a == b)
        .count();
    if n == 0 {
        return 0;
    }
    let mut prefix = req.clone();
    if let Some(messages) = prefix
        .body
        .get_mut("messages")
        .and_then(Value::as_array_mut)
    {
        messages.truncate(n);
    }
    tokens(&prefix)
}

/// One scenario's hops, as the engine received them: (hop, model, tokens, tokens shared as a
/// prefix with the same model's previous answer request).
struct Run {
    hops: Vec<(String, String, u64, u64)>,
}

impl Run {
    fn of(engine: &MockEngine) -> Run {
        let requests = engine.chat_requests();
        let mut hops = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            let shared = requests[..i]
                .iter()
                .rev()
                .find(|b| b.hop_or_answer() == "answer" && b.model() == r.model())
                .map_or(0, |b| shared_prefix(r, b));
            hops.push((
                r.hop_or_answer().to_string(),
                r.model().to_string(),
                tokens(r),
                shared,
            ));
        }
        Run { hops }
    }

    /// Summary and compaction hops: (total tokens, tokens shared with the answer before).
    fn side_hops_shared(&self) -> (u64, u64) {
        self.hops
            .iter()
            .filter(|h| h.0 == "summary" || h.0 == "compaction")
            .fold((0, 0), |(t, s), h| (t + h.2, s + h.3))
    }

    /// Per hop kind: (requests, total tokens, largest request).
    fn by_hop(&self) -> BTreeMap<String, (usize, u64, u64)> {
        let mut out: BTreeMap<String, (usize, u64, u64)> = BTreeMap::new();
        for (hop, _, t, _) in &self.hops {
            let e = out.entry(hop.clone()).or_default();
            e.0 += 1;
            e.1 += t;
            e.2 = e.2.max(*t);
        }
        out
    }

    fn total(&self) -> u64 {
        self.hops.iter().map(|h| h.2).sum()
    }

    fn answers(&self) -> Vec<u64> {
        self.hops
            .iter()
            .filter(|h| h.0 == "answer")
            .map(|h| h.2)
            .collect()
    }
}

/// A scripted engine whose every reply reports the request's estimated size as its usage.
fn engine(script: Script, max_model_len: Option<u64>) -> MockEngine {
    let models: Vec<(&str, Option<u64>)> = ["L0", "L1", "L2", "L3"]
        .into_iter()
        .map(|m| (m, Some(max_model_len.unwrap_or(262_144))))
        .collect();
    MockEngine::builder()
        .models(models)
        .start_blocking(move |req| script.reply(req).usage(tokens(req), 40))
}

struct Workspace {
    _root: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    sessions: PathBuf,
}

impl Workspace {
    fn new() -> Workspace {
        let root = tempfile::tempdir().expect("tempdir");
        let home = root.path().join("home");
        let ws = root.path().join("ws");
        std::fs::create_dir_all(&home).expect("mkdir");
        std::fs::create_dir_all(&ws).expect("mkdir");
        Workspace {
            home,
            sessions: root.path().join("sessions"),
            ws,
            _root: root,
        }
    }

    fn write(&self, path: &str, text: &str) {
        let p = self.ws.join(path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        std::fs::write(p, text).expect("write");
    }

    /// Runs one `baton --exec` turn; `stdin` is piped when given.
    fn exec(
        &self,
        baton: &Path,
        engine: &MockEngine,
        prompt: &str,
        extra: &[&str],
        stdin: Option<&[u8]>,
    ) {
        let mut c = Command::new(baton);
        c.env_clear()
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("XDG_DATA_HOME", self.home.join(".local/share"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&self.ws)
            .args(["--exec", "--json", "--endpoint"])
            .arg(engine.url())
            .arg("--session-dir")
            .arg(&self.sessions)
            .args(["--approval", "full-auto", "--sandbox", "off"])
            .args(extra)
            .arg(prompt)
            // Piped input is appended only when `-` asks for it.
            .args(stdin.map(|_| "-"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = c.spawn().expect("run baton");
        if let Some(bytes) = stdin {
            let mut pipe = child.stdin.take().expect("stdin");
            let bytes = bytes.to_vec();
            std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            });
        }
        let out = child.wait_with_output().expect("wait");
        if !out.status.success() {
            println!(
                "  (baton exited with {}: {})",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
}

fn call(id: &str, name: &str, args: Value) -> MockReply {
    MockReply::tool_call(id, name, args.to_string())
}

const SUMMARY: &str = "Answered the question; nothing left open.";
const HANDOFF: &str = "Goal: read every chapter and note its key number. Done so far: the chapters read \
    are listed in the plan. Next: read the next chapter.";

fn l0_question(baton: &Path) -> Run {
    let w = Workspace::new();
    let script = Script::new()
        .route("L0")
        .answer("L0", "ISO 8601 weeks start on Monday; week 1 holds the first Thursday. Of 2024-2030 only 2026 has a week 53.")
        .default_summary(SUMMARY);
    let e = engine(script, None);
    w.exec(
        baton,
        &e,
        "Quick question: how exactly are ISO 8601 week numbers defined, and which years from 2024 to 2030 have a week 53?",
        &[],
        None,
    );
    Run::of(&e)
}

fn l2_coding(baton: &Path) -> Run {
    let w = Workspace::new();
    w.write(
        "calc.py",
        "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    );
    w.write(
        "test_calc.py",
        "import unittest\nfrom calc import add, mul\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n\n\nif __name__ == '__main__':\n    unittest.main()\n",
    );
    w.write("README.md", "# calc\n\nA tiny calculator.\n");
    let plan = json!({"plan":[
        {"step":"find the failing test","status":"completed"},
        {"step":"fix add","status":"in_progress"},
        {"step":"rerun the tests","status":"pending"}]});
    let steps = vec![
        call("c1", "list_dir", json!({"path": "."})),
        call("c2", "read_file", json!({"path": "calc.py"})),
        call("c3", "read_file", json!({"path": "test_calc.py"})),
        call("c4", "grep", json!({"pattern": "def add"})),
        call(
            "c5",
            "shell",
            json!({"command": "python3 -m unittest -q 2>&1 | tail -5"}),
        ),
        call("c6", "update_plan", plan),
        call(
            "c7",
            "edit",
            json!({"path": "calc.py", "old_string": "    return a - b", "new_string": "    return a + b"}),
        ),
        call(
            "c8",
            "shell",
            json!({"command": "python3 -m unittest -q 2>&1 | tail -5"}),
        ),
        call("c9", "read_file", json!({"path": "calc.py"})),
        call(
            "c10",
            "write_file",
            json!({"path": "CHANGES.md", "content": "- add() returned a - b; it now adds.\n"}),
        ),
    ];
    let mut script = Script::new().route("L2");
    for s in steps {
        script = script.answer("L2", s);
    }
    let script = script
        .answer(
            "L2",
            "Fixed add() in calc.py (it subtracted); both tests pass.",
        )
        .default_summary("Fixed add() in calc.py; tests pass.");
    let e = engine(script, None);
    w.exec(
        baton,
        &e,
        "The tests of calc fail. Fix the bug and make them pass.",
        &[],
        None,
    );
    Run::of(&e)
}

fn l1_l2_handoff(baton: &Path) -> Run {
    let w = Workspace::new();
    w.write(
        "household.md",
        "Ann away 2-8 March. Bo away 10-14 March. Cleaner costs 40 EUR a visit.\n",
    );
    let plan = json!({"plan":[
        {"step":"read the household notes","status":"completed"},
        {"step":"write the March plan","status":"in_progress"}]});
    let script = Script::new()
        .routes(["L1", "L2"])
        .answer("L1", call("a1", "read_file", json!({"path": "household.md"})))
        .answer("L1", call("a2", "update_plan", plan))
        .answer(
            "L1",
            call(
                "a3",
                "write_file",
                json!({"path": "plan.md", "content": "# March\n- week 10: Bo cooks (Ann away)\n- week 11: cleaner booked, 40 EUR\n"}),
            ),
        )
        .answer("L1", "Wrote plan.md: Bo cooks in week 10, a cleaner (40 EUR) in week 11.")
        .summary("L1", "Wrote plan.md for March: Bo cooks week 10, cleaner week 11 (40 EUR).")
        .answer("L2", call("b1", "read_file", json!({"path": "plan.md"})))
        .answer(
            "L2",
            call(
                "b2",
                "write_file",
                json!({"path": "plan.py", "content": "PLAN = {10: 'Bo cooks', 11: 'cleaner (40 EUR)'}\n"}),
            ),
        )
        .answer("L2", "Wrote plan.py with the March plan as a dict.")
        .default_summary("Wrote plan.py.");
    let e = engine(script, None);
    w.exec(
        baton,
        &e,
        "Plan who cooks and when to book the cleaner in March, from household.md.",
        &[],
        None,
    );
    w.exec(
        baton,
        &e,
        "Now turn that plan into a Python dict in plan.py.",
        &["--resume", "last"],
        None,
    );
    Run::of(&e)
}

fn stdin_440k(baton: &Path) -> Run {
    let w = Workspace::new();
    let words = [
        "harbor", "lantern", "meadow", "ledger", "orbit", "sable", "stone",
    ];
    let mut log = String::new();
    let mut i = 0usize;
    while log.len() < 440 * 1024 {
        log.push_str(&format!(
            "2026-03-01T12:{:02}:{:02} INFO worker-{} {} {} {}\n",
            (i / 60) % 60,
            i % 60,
            i % 7,
            words[i % 7],
            words[(i * 3) % 7],
            words[(i * 5 + 1) % 7]
        ));
        i += 1;
    }
    let script = Script::new()
        .route("L2")
        .answer("L2", "The most frequent word is 'harbor'.")
        .default_summary("Counted the words of the log: 'harbor' is the most frequent.");
    let e = engine(script, None);
    w.exec(
        baton,
        &e,
        "What is the most frequent word in this log?",
        &[],
        Some(log.as_bytes()),
    );
    Run::of(&e)
}

fn read_loop_8k(baton: &Path) -> Run {
    let w = Workspace::new();
    let words = [
        "harbor", "lantern", "meadow", "ledger", "orbit", "sable", "stone", "fable",
    ];
    for n in 1..=7 {
        let mut text = format!(
            "Chapter {n}. The key number of this chapter is {}.\n",
            1000 + n * 37
        );
        let mut k = n;
        while text.len() < 8 * 1024 {
            let line: Vec<&str> = (0..9).map(|j| words[(k * 7 + j * 3) % 8]).collect();
            text.push_str(&line.join(" "));
            text.push_str(".\n");
            k += 1;
        }
        w.write(&format!("chapters/ch{n}.txt"), &text);
    }
    let mut script = Script::new();
    for n in 1..=7 {
        script = script.answer(
            "L2",
            call(
                &format!("r{n}"),
                "read_file",
                json!({"path": format!("chapters/ch{n}.txt")}),
            ),
        );
    }
    let script = script
        .answer(
            "L2",
            call(
                "w1",
                "write_file",
                json!({"path": "numbers.txt", "content": "1037 1074 1111 1148 1185 1222 1259\n"}),
            ),
        )
        .answer("L2", "Wrote numbers.txt with the seven key numbers.")
        .default_summary("Wrote numbers.txt.");
    script.set_default("compaction", None, HANDOFF);
    let e = engine(script, Some(8192));
    w.exec(
        baton,
        &e,
        "Read chapters/ch1.txt to ch7.txt one at a time and write each chapter's key number to numbers.txt.",
        &["--expert", "L2", "--context-window", "8192"],
        None,
    );
    Run::of(&e)
}

type Scenario = fn(&Path) -> Run;

const SCENARIOS: [(&str, Scenario); 5] = [
    ("l0-question", l0_question),
    ("l2-coding", l2_coding),
    ("l1-l2-handoff", l1_l2_handoff),
    ("stdin-440k", stdin_440k),
    ("read-loop-8k", read_loop_8k),
];

fn main() {
    let this = PathBuf::from(env!("CARGO_BIN_EXE_baton"));
    // Absolute: each run starts in its own workspace folder.
    let baseline = std::env::var_os("MOL_TOKENS_BASELINE")
        .map(PathBuf::from)
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p));
    let verbose = std::env::var_os("MOL_TOKENS_VERBOSE").is_some();
    let mut builds = vec![("this build", this)];
    if let Some(b) = baseline {
        builds.insert(0, ("baseline", b));
    }
    println!("MoL prompt tokens per hop (estimate: chars / 3.6 + 4 per message; mock engine)");
    for (name, scenario) in SCENARIOS {
        println!("\n{name}");
        for (label, baton) in &builds {
            let run = scenario(baton);
            let by_hop = run.by_hop();
            let hops: Vec<String> = ["route", "answer", "summary", "compaction"]
                .iter()
                .filter_map(|h| {
                    by_hop
                        .get(*h)
                        .map(|(n, total, max)| format!("{h} {n}x {total} (max {max})"))
                })
                .collect();
            let shared: u64 = run.hops.iter().map(|h| h.3).sum();
            println!(
                "  {label:<10}  total {:>7} (to prefill with a prefix cache: {:>7})  {}",
                run.total(),
                run.total() - shared,
                hops.join(" | ")
            );
            println!("  {:<10}  answer hops: {:?}", "", run.answers());
            let (side, shared) = run.side_hops_shared();
            if side > 0 {
                println!(
                    "  {:<10}  summary+compaction: {shared} of {side} tokens shared as a prefix with the answer hop before ({:.0}%)",
                    "",
                    100.0 * shared as f64 / side as f64
                );
            }
            if verbose {
                for (hop, model, t, shared) in &run.hops {
                    println!(
                        "  {:<10}    {hop:<10} {model:<3} {t} (prefix shared {shared})",
                        ""
                    );
                }
            }
        }
    }
}
