//! MoL latency benchmark (`cargo bench --bench mol_latency`).
//!
//! Against the mock engine with the reference's measured hop latencies (route 0.20 s, answer
//! 1.24 s, summary 0.32 s) it runs, side by side:
//! - baton: the agent core's turn, from submitting the turn to `TurnCompleted` (the answer),
//!   with the summary hop off the critical path;
//! - the reference design: route → answer → summary, sequential, as the harness does it.
//!
//! and prints both against the ideal route + answer, with ratios; then baton with
//! `speculate = off` and `sticky` where the route keeps one expert (a hit) and where it
//! alternates (a miss), median of turns 2–6. It also measures baton's own
//! CPU time per turn (the agent's thread only; the mock engine runs on other threads) and the
//! CPU time and peak RSS of one real `baton --exec` process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

// The bench uses a few of the tests' helpers; the rest is dead here, not in the tests.
#[allow(dead_code)]
#[path = "../../tests/support/mock_engine.rs"]
mod mock_engine;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use baton::agent::{AgentConfig, DEFAULT_SYSTEM_PROMPT, spawn_agent};
use baton::backend::remote::RemoteBackend;
use baton::backend::{ChatBackend, ChatRequest, complete};
use baton::mol::{self, Profile, ProfileNames, Timeline, with_identity};
use baton::protocol::ApprovalPolicy;
use baton::protocol::ChatMessage;
use baton::protocol::{Event, Hop, Op};
use baton::protocol::{Mode, Speculate};
use baton::session::SessionFile;
use mock_engine::{MockEngine, MockReply, RecordedRequest};

const ROUTE: Duration = Duration::from_millis(200);
const ANSWER: Duration = Duration::from_millis(1240);
const SUMMARY: Duration = Duration::from_millis(320);
const TURNS: usize = 6;
/// Time between a turn's answer and the user's next message (reading, typing).
const THINK: Duration = Duration::from_millis(600);

fn engine() -> MockEngine {
    let routes = Arc::new(AtomicUsize::new(0));
    MockEngine::start_blocking(move |req: &RecordedRequest| match req.hop_or_answer() {
        // Alternate experts so every turn needs the previous turn's summary.
        "route" => {
            let n = routes.fetch_add(1, Ordering::SeqCst);
            MockReply::label(if n.is_multiple_of(2) { "L2" } else { "L1" }).after(ROUTE)
        }
        "summary" => MockReply::text("Did the thing.").after(SUMMARY),
        _ => MockReply::text("Here is the answer.").after(ANSWER),
    })
}

/// Every route picks L2: a sticky speculation always hits.
fn engine_same_expert() -> MockEngine {
    MockEngine::start_blocking(move |req: &RecordedRequest| match req.hop_or_answer() {
        "route" => MockReply::label("L2").after(ROUTE),
        "summary" => MockReply::text("Did the thing.").after(SUMMARY),
        _ => MockReply::text("Here is the answer.").after(ANSWER),
    })
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn agent_config(dir: &std::path::Path, speculate: Speculate) -> AgentConfig {
    AgentConfig {
        mode: Mode::Mol,
        model: None,
        pinned: None,
        reasoning: None,
        approval: ApprovalPolicy::Never,
        allowed_commands: Vec::new(),
        headless: true,
        max_round_trips: None,
        system_prompt: DEFAULT_SYSTEM_PROMPT.into(),
        experts: Default::default(),
        profile: Profile::builtin(&ProfileNames::default()),
        workspace: dir.to_path_buf(),
        session_dir: dir.join("sessions"),
        temperature: None,
        top_p: None,
        seed: None,
        max_tokens: None,
        context_window: None,
        sandbox: Default::default(),
        network: false,
        compact_at: None,
        hooks: baton::hooks::Hooks::none(),
        speculate,
        // Every turn routed: the bench measures what speculation saves on the route hop.
        follow_ups: baton::protocol::FollowUps::Route,
        defer_summaries: false,
    }
}

/// baton: per turn, submit → TurnCompleted, and the agent thread's CPU time for the turn.
async fn baton_turns(
    url: &str,
    think: Duration,
    speculate: Speculate,
) -> (Vec<Duration>, Vec<Duration>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = agent_config(dir.path(), speculate);
    let backend: Arc<dyn ChatBackend> =
        Arc::new(RemoteBackend::builder(url).build().expect("backend"));
    let session = SessionFile::create(&cfg.session_dir, "mol", url, dir.path()).expect("session");
    let mut h = spawn_agent(
        cfg,
        backend,
        baton::tool::registry::standard_tools(),
        session,
        None,
    );
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for i in 0..TURNS {
        let c0 = thread_cpu();
        let t0 = Instant::now();
        h.ops
            .send(Op::UserTurn {
                text: format!("request number {i}"),
            })
            .expect("send");
        loop {
            match h.events.recv().await.expect("agent alive") {
                Event::TurnCompleted { .. } => break,
                _ => continue,
            }
        }
        wall.push(t0.elapsed());
        // CPU of the turn while waiting on the network is all baton's (this thread runs the
        // agent; the mock engine has its own threads). Sleep time costs no CPU.
        cpu.push(thread_cpu() - c0);
        tokio::time::sleep(think).await;
    }
    let _ = h.ops.send(Op::Shutdown);
    while let Some(ev) = h.events.recv().await {
        if matches!(ev, Event::ShutdownComplete) {
            break;
        }
    }
    (wall, cpu)
}

/// The reference design: route, answer, summary in sequence before the answer is returned.
async fn reference_turns(url: &str) -> Vec<Duration> {
    let backend = RemoteBackend::builder(url).build().expect("backend");
    let profile = Profile::builtin(&ProfileNames::default());
    let head = with_identity(
        &[ChatMessage::system(DEFAULT_SYSTEM_PROMPT)],
        &profile.intro,
    );
    let mut timeline = Timeline::new();
    let mut out = Vec::new();
    for i in 0..TURNS {
        let text = format!("request number {i}");
        let t0 = Instant::now();
        let routed = mol::route(&backend, &profile, &text, None).await;
        let id = timeline.open(routed.expert, text);
        let view = timeline.view(routed.expert, &head);
        let answer = complete(
            &backend,
            ChatRequest::new(profile.adapter(routed.expert), view, Hop::Answer),
        )
        .await
        .expect("answer");
        timeline.push(ChatMessage::assistant(answer.message.content));
        timeline.close(true);
        let task = timeline.task(id).cloned().expect("task");
        let summary = mol::summarize(&backend, &profile, &task, &head).await;
        timeline.record_summary(id, summary.text);
        out.push(t0.elapsed());
    }
    out
}

/// One real `baton --exec` process: its CPU time (user + sys) and peak RSS.
fn exec_process(url: &str) -> (Duration, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = children_usage();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["--exec", "--endpoint", url, "--session-dir"])
        .arg(dir.path().join("s"))
        .arg("-C")
        .arg(dir.path())
        .arg("say hello")
        .env("XDG_CONFIG_HOME", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run baton");
    assert!(status.success(), "baton --exec failed: {status}");
    let after = children_usage();
    let cpu = |u: &libc::rusage| {
        Duration::new(u.ru_utime.tv_sec as u64, u.ru_utime.tv_usec as u32 * 1000)
            + Duration::new(u.ru_stime.tv_sec as u64, u.ru_stime.tv_usec as u32 * 1000)
    };
    // ru_maxrss of RUSAGE_CHILDREN is the largest child so far: this is the only child.
    (cpu(&after) - cpu(&before), after.ru_maxrss as u64)
}

fn children_usage() -> libc::rusage {
    // SAFETY: getrusage fills the zeroed struct we own.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        u
    }
}

fn mean(xs: &[Duration]) -> Duration {
    xs.iter().sum::<Duration>() / xs.len().max(1) as u32
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn main() {
    // Cargo passes `--bench`; there are no options.
    let engine = engine();
    let url = engine.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let ideal = ROUTE + ANSWER;
    let reference_model = ROUTE + ANSWER + SUMMARY;

    let (baton_wall, baton_cpu) = runtime.block_on(baton_turns(&url, THINK, Speculate::Off));
    let (burst_wall, _) = runtime.block_on(baton_turns(&url, Duration::ZERO, Speculate::Off));
    let same = engine_same_expert();
    let median_later = |mut xs: Vec<Duration>| {
        xs.remove(0);
        xs.sort();
        xs[xs.len() / 2]
    };
    let spec = |url: &str, mode| median_later(runtime.block_on(baton_turns(url, THINK, mode)).0);
    let off_same = spec(&same.url(), Speculate::Off);
    let hit = spec(&same.url(), Speculate::Sticky);
    let off_alternating = spec(&url, Speculate::Off);
    let miss = spec(&url, Speculate::Sticky);
    let reference = runtime.block_on(reference_turns(&url));
    let (exec_cpu, exec_rss_kib) = exec_process(&url);

    let b = mean(&baton_wall);
    let burst = mean(&burst_wall);
    let r = mean(&reference);
    println!(
        "MoL latency benchmark: mock engine, route {} + answer {} (+ summary {}), {TURNS} turns each, experts alternating",
        secs(ROUTE),
        secs(ANSWER),
        secs(SUMMARY)
    );
    println!(
        "  ideal (route + answer)                      {}",
        secs(ideal)
    );
    println!(
        "  baton, submit → answer (user pauses {:.1} s)   {}   ratio to ideal {:.3}",
        THINK.as_secs_f64(),
        secs(b),
        b.as_secs_f64() / ideal.as_secs_f64()
    );
    println!(
        "  baton, turns back to back (worst case)      {}   ratio to ideal {:.3}",
        secs(burst),
        burst.as_secs_f64() / ideal.as_secs_f64()
    );
    println!(
        "  reference design (route + answer + summary) {}   ratio to ideal {:.3} (model {})",
        secs(r),
        r.as_secs_f64() / ideal.as_secs_f64(),
        secs(reference_model)
    );
    println!(
        "  baton / reference                           {:.3}",
        b.as_secs_f64() / r.as_secs_f64()
    );
    println!(
        "  baton CPU per turn (agent thread)           {:.2} ms mean, {:.2} ms max",
        mean(&baton_cpu).as_secs_f64() * 1e3,
        baton_cpu
            .iter()
            .max()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    );
    println!(
        "  speculation, median of turns 2-{TURNS}: same expert: off {}, sticky (hit) {} = {:.3} x answer alone; alternating: off {}, sticky (miss) {} = {:.3} x off",
        secs(off_same),
        secs(hit),
        hit.as_secs_f64() / ANSWER.as_secs_f64(),
        secs(off_alternating),
        secs(miss),
        miss.as_secs_f64() / off_alternating.as_secs_f64()
    );
    println!(
        "  one `baton --exec` process                  {:.1} ms CPU, peak RSS {:.1} MiB",
        exec_cpu.as_secs_f64() * 1e3,
        exec_rss_kib as f64 / 1024.0
    );
}
