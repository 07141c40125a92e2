//! `baton serve` benchmark (`cargo bench --bench serve_latency`).
//!
//! The real server binary in front of the mock engine with the reference's measured hop
//! latencies (route 0.20 s, answer 1.24 s, summary 0.32 s; experts alternate, so every turn's
//! view needs the previous turn's summary). It prints:
//! - one conversation, turn by turn: time to the client's last byte, non-stream and stream
//!   (`[DONE]`), against route + answer and against the reference design's sequential
//!   route + answer + summary;
//! - N conversations × 5 turns at once (N = 64, then more): p50/p99 per turn, requests/s,
//!   the server's CPU time per turn and its peak RSS;
//! - the speculative answer: one conversation per case on a server with `--speculate off` and
//!   one with `--speculate sticky`, the median turn (of 8, turn 1 left out) where the route
//!   keeps the previous turn's expert (a hit) and where it alternates (a miss).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[allow(dead_code)]
#[path = "../../tests/support/mock_engine.rs"]
mod mock_engine;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mock_engine::{MockEngine, MockReply, RecordedRequest};
use serde_json::{Value, json};

const ROUTE: Duration = Duration::from_millis(200);
const ANSWER: Duration = Duration::from_millis(1240);
const SUMMARY: Duration = Duration::from_millis(320);
const MODEL: &str = "bench-mol";

fn engine() -> MockEngine {
    MockEngine::start_blocking(move |req: &RecordedRequest| {
        if req.is_route() {
            let text = req.messages()[0]["content"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let label = if text.contains("odd") { "L1" } else { "L2" };
            return MockReply::label(label).after(ROUTE);
        }
        if req.is_summary() {
            return MockReply::text("Did the thing.").after(SUMMARY);
        }
        MockReply::text("Here is the answer, in a few words.")
            .chunk_chars(8)
            .after(ANSWER)
    })
}

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(engine: &MockEngine, home: &std::path::Path) -> Server {
    start_with(engine, home, &[])
}

fn start_with(engine: &MockEngine, home: &std::path::Path, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .env_clear()
        .env("HOME", home)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--endpoint",
            &engine.url(),
        ])
        .args([
            "--served-model-name",
            MODEL,
            "--max-in-flight",
            "4096",
            "--max-queued",
            "4096",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines.next().expect("serve started").unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Server { child, url }
}

/// CPU seconds (user + system) the process has used.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn turn(
    client: &reqwest::Client,
    url: &str,
    conv: &str,
    history: &[Value],
    stream: bool,
) -> Duration {
    let started = Instant::now();
    let body = json!({"model": MODEL, "messages": history, "stream": stream});
    let response = client
        .post(format!("{url}/chat/completions"))
        .header("X-Conversation-Id", conv)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(!stream || text.trim_end().ends_with("data: [DONE]"));
    started.elapsed()
}

/// The median turn (turn 1 left out) of one conversation whose route keeps one expert
/// (`alternate` false: every turn "even", L2) or alternates L2 / L1.
async fn speculation_case(
    client: &reqwest::Client,
    url: &str,
    conv: &str,
    alternate: bool,
) -> Duration {
    let mut history = Vec::new();
    let mut times = Vec::new();
    for t in 0..9 {
        let parity = if alternate && t % 2 == 1 {
            "odd"
        } else {
            "even"
        };
        history.push(json!({"role": "user", "content": format!("{conv} turn {t} ({parity})")}));
        times.push(turn(client, url, conv, &history, false).await);
        history
            .push(json!({"role": "assistant", "content": "Here is the answer, in a few words."}));
        // Reading time: the previous turn's summary is in before the next turn.
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let mut later = times[1..].to_vec();
    later.sort();
    later[later.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn conversation(
    client: reqwest::Client,
    url: String,
    n: usize,
    turns: usize,
) -> Vec<Duration> {
    let conv = format!("bench-conversation-{n:06}");
    let mut history = Vec::new();
    let mut out = Vec::new();
    for t in 0..turns {
        let parity = if t % 2 == 1 { "odd" } else { "even" };
        history.push(json!({"role": "user", "content": format!("c{n} turn {t} ({parity})")}));
        out.push(turn(&client, &url, &conv, &history, false).await);
        history
            .push(json!({"role": "assistant", "content": "Here is the answer, in a few words."}));
    }
    out
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let engine = engine();
    let server = start(&engine, home.path());
    let ideal = ROUTE + ANSWER;
    let reference = ROUTE + ANSWER + SUMMARY;
    println!(
        "hops: route {:.2} s, answer {:.2} s, summary {:.2} s; route+answer {:.2} s; reference design (sequential, summary before the last byte) {:.2} s",
        ROUTE.as_secs_f64(),
        ANSWER.as_secs_f64(),
        SUMMARY.as_secs_f64(),
        ideal.as_secs_f64(),
        reference.as_secs_f64()
    );
    runtime.block_on(async {
        baton::protocol::install_tls_provider();
        let client = reqwest::Client::builder().pool_max_idle_per_host(4096).build().unwrap();
        for stream in [false, true] {
            let conv = format!("bench-single-{}", if stream { "stream" } else { "whole" });
            let mut history = Vec::new();
            let mut times = Vec::new();
            for t in 0..6 {
                let parity = if t % 2 == 1 { "odd" } else { "even" };
                history.push(json!({"role": "user", "content": format!("single turn {t} ({parity})")}));
                times.push(turn(&client, &server.url, &conv, &history, stream).await);
                history.push(json!({"role": "assistant", "content": "Here is the answer, in a few words."}));
                // The user reads the answer before the next message.
                tokio::time::sleep(Duration::from_millis(600)).await;
            }
            let later = &times[1..];
            let mean = later.iter().sum::<Duration>() / later.len() as u32;
            println!(
                "one conversation, {}: turn 1 {:.3} s; turns 2-6 mean {:.3} s = {:.3} x (route+answer), {:.3} x the reference design",
                if stream { "stream, to [DONE]" } else { "non-stream, to the last byte" },
                times[0].as_secs_f64(),
                mean.as_secs_f64(),
                mean.as_secs_f64() / ideal.as_secs_f64(),
                mean.as_secs_f64() / reference.as_secs_f64()
            );
        }
        let speculating = start_with(&engine, home.path(), &["--speculate", "sticky"]);
        let off_hit = speculation_case(&client, &server.url, "bench-speculation-off-same", false).await;
        let on_hit = speculation_case(&client, &speculating.url, "bench-speculation-on-same", false).await;
        let off_miss = speculation_case(&client, &server.url, "bench-speculation-off-alternating", true).await;
        let on_miss = speculation_case(&client, &speculating.url, "bench-speculation-on-alternating", true).await;
        let metrics = client
            .get(format!("{}/metrics", speculating.url.trim_end_matches("/v1")))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        drop(speculating);
        let answer = ANSWER.as_secs_f64();
        println!(
            "speculation, median non-stream turn: same expert: off {:.3} s, sticky (hit) {:.3} s = {:.3} x answer alone; alternating experts: off {:.3} s, sticky (miss) {:.3} s = {:.3} x off",
            off_hit.as_secs_f64(),
            on_hit.as_secs_f64(),
            on_hit.as_secs_f64() / answer,
            off_miss.as_secs_f64(),
            on_miss.as_secs_f64(),
            on_miss.as_secs_f64() / off_miss.as_secs_f64()
        );
        for line in metrics.lines().filter(|l| l.starts_with("baton_serve_speculat")) {
            println!("  {line}");
        }
        let mut baseline_p99 = None;
        for n in [64usize, 256, 1024] {
            let cpu_before = cpu_secs(server.child.id());
            let started = Instant::now();
            let tasks: Vec<_> = (0..n)
                .map(|i| tokio::spawn(conversation(client.clone(), server.url.clone(), n * 10_000 + i, 5)))
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.unwrap());
            }
            let wall = started.elapsed();
            let cpu = cpu_secs(server.child.id()) - cpu_before;
            all.sort();
            let (p50, p99) = (percentile(&all, 0.5), percentile(&all, 0.99));
            let baseline = *baseline_p99.get_or_insert(p99);
            println!(
                "{n} conversations x 5 turns: p50 {:.3} s, p99 {:.3} s ({:.2} x the 64-conversation p99), {:.1} requests/s, server CPU {:.2} ms per turn, peak RSS {:.1} MiB",
                p50.as_secs_f64(),
                p99.as_secs_f64(),
                p99.as_secs_f64() / baseline.as_secs_f64(),
                all.len() as f64 / wall.as_secs_f64(),
                cpu * 1000.0 / all.len() as f64,
                peak_rss_mib(server.child.id())
            );
        }
    });
    drop(server);
}
