//! TUI render benchmark (`cargo bench --bench tui_render`): one frame of a 10,000-message
//! transcript scrolled to the bottom, startup to first frame, and keypress-to-frame while an
//! answer streams at 100 tokens/s. Each figure is reported next to a baseline run side by side in
//! the same process — a frame of an empty transcript — as an absolute time and as a ratio, so
//! machine noise shows up in both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use baton::protocol::{Event, Expert, ToolStatus};
use baton::tui::{App, ColorDepth, TuiOptions, render};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

const WIDTH: u16 = 120;
const HEIGHT: u16 = 40;

fn options() -> TuiOptions {
    TuiOptions::new(PathBuf::from("/bench/workspace"))
}

fn fill(app: &mut App, messages: usize) {
    for i in 0..messages {
        let ev = match i % 4 {
            0 => Event::TurnStarted {
                turn_id: i as u64,
                text: format!("question {i}: please look at src/module_{i}.rs and fix it"),
            },
            1 => Event::MessageFinal {
                turn_id: i as u64,
                expert: Some(Expert::L2),
                text: format!(
                    "## Step {i}\n\nThe function **`f{i}`** fails because the loop skips the last element.\n\n- check the bounds\n- add a test\n\n```rust\nfn f{i}(v: &[u32]) -> u32 {{\n    v.iter().sum()\n}}\n```\n"
                ),
            },
            2 => Event::ToolBegin {
                turn_id: i as u64,
                call_id: format!("c{i}"),
                tool: "shell".into(),
                arguments: serde_json::json!({}),
                title: format!("cargo test module_{i}"),
            },
            _ => Event::ToolEnd {
                call_id: format!("c{}", i - 1),
                status: ToolStatus::Ok,
                exit_code: Some(0),
                duration_ms: 1200,
                output: (0..12).map(|k| format!("test t{k} ... ok\n")).collect(),
            },
        };
        app.handle_event(ev);
    }
    app.handle_event(Event::TurnCompleted {
        turn_id: 0,
        status: baton::protocol::TurnStatus::Done,
        answer: None,
        expert: None,
        duration_ms: 1,
        usage: Default::default(),
        usage_by_hop: Default::default(),
        session_usage: Default::default(),
    });
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() * 99 / 100]
}

fn frame_samples(app: &App, term: &mut Terminal<TestBackend>, n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        term.draw(|f| render(app, f)).expect("draw");
        times.push(t.elapsed());
    }
    times
}

fn frame_times(app: &App, term: &mut Terminal<TestBackend>, n: usize) -> Duration {
    median(frame_samples(app, term, n))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let depth = ColorDepth::TrueColor;

    // Startup: App construction (theme parse, history) to the first frame drawn.
    let mut startups = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let app = App::with_depth(options(), depth, Instant::now());
        let mut term = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).expect("terminal");
        term.draw(|f| render(&app, f)).expect("draw");
        startups.push(t.elapsed());
    }
    let startup = median(startups);

    let empty = App::with_depth(options(), depth, Instant::now());
    let mut term = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).expect("terminal");
    let baseline_samples = frame_samples(&empty, &mut term, 200);
    let baseline_p99 = p99(baseline_samples.clone());
    let baseline = median(baseline_samples);

    let mut big = App::with_depth(options(), depth, Instant::now());
    let t = Instant::now();
    fill(&mut big, 10_000);
    let fill_time = t.elapsed();
    let mut term = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).expect("terminal");
    let t = Instant::now();
    term.draw(|f| render(&big, f)).expect("draw");
    let first_big = t.elapsed();
    let bottom = frame_times(&big, &mut term, 200);
    let baseline2 = frame_times(
        &empty,
        &mut Terminal::new(TestBackend::new(WIDTH, HEIGHT)).expect("terminal"),
        200,
    );

    // Scrolling to the very top lays out every cell once (then cached).
    let t = Instant::now();
    big.handle_key(KeyEvent::new(KeyCode::Home, KeyModifiers::CONTROL));
    term.draw(|f| render(&big, f)).expect("draw");
    let to_top = t.elapsed();
    big.handle_key(KeyEvent::new(KeyCode::End, KeyModifiers::CONTROL));

    // Keypress-to-frame while an answer streams at 100 tokens/s: each 10 ms a token arrives; a key
    // is typed every 5th token; measured: handling the key + the token batch + drawing.
    big.handle_event(Event::TurnStarted {
        turn_id: 99_999,
        text: "stream".into(),
    });
    let mut latencies = Vec::new();
    for i in 0..600 {
        big.handle_event(Event::MessageDelta {
            turn_id: 99_999,
            expert: Some(Expert::L2),
            delta: format!("word{i} "),
        });
        if i % 40 == 39 {
            big.handle_event(Event::MessageDelta {
                turn_id: 99_999,
                expert: None,
                delta: "\n\n".into(),
            });
        }
        if i % 5 == 0 {
            let t = Instant::now();
            big.handle_key(KeyEvent::new(KeyCode::Char('x'), KeyModifiers::NONE));
            term.draw(|f| render(&big, f)).expect("draw");
            latencies.push(t.elapsed());
        }
    }
    let input_latency = median(latencies.clone());
    let stream_p99 = p99(latencies);

    let base = (ms(baseline) + ms(baseline2)) / 2.0;
    println!("tui_render ({WIDTH}x{HEIGHT}, TestBackend)");
    println!(
        "  baseline: empty transcript frame      {:8.3} ms median, {:.3} ms p99 (p99 = machine noise)",
        base,
        ms(baseline_p99)
    );
    println!(
        "  10,000-message transcript, bottom     {:8.3} ms median   ({:.2}x baseline; target < 4 ms)",
        ms(bottom),
        ms(bottom) / base
    );
    println!(
        "  first frame after loading 10,000      {:8.3} ms          (incl. compiling the Rust highlight query once; events applied in {:.1} ms)",
        ms(first_big),
        ms(fill_time)
    );
    println!(
        "  scroll to top (lays out all cells)    {:8.3} ms once",
        ms(to_top)
    );
    println!(
        "  key + frame while streaming 100 tok/s {:8.3} ms median, {:.3} ms p99 (target < 16 ms)",
        ms(input_latency),
        ms(stream_p99)
    );
    println!(
        "  startup to first frame                {:8.3} ms median   (target < 100 ms)",
        ms(startup)
    );
}
