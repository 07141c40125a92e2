//! Engine benchmark (run by tools/bench/engine/bench.py): prefill and decode speed for the base
//! model and with an adapter, adapter overhead, memory against the weight bytes + KV (peak during
//! load and overall), and an agent loop with prefix reuse, on a dense Qwen3 or a Qwen3.5-MoE
//! root. Prints one JSON object.
//!
//! `cargo bench --bench engine -- ROOT [--prefill N] [--decode N] [--steps N] [--dump DIR]`
//! (`--dump DIR`: write the last-position logits of a 16-token prompt, base and adapter, as raw
//! little-endian f32 to DIR/base.f32 and DIR/adapter.f32.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use baton::engine::device::cpu::CpuDevice;
use baton::engine::device::{DeltaShape, HybridDevice};
use baton::engine::{DeltaRuleForm, Engine, GenerateRequest, SamplingParams};
use baton::protocol::DeviceChoice;

/// Counts heap allocations, to check that a decode step allocates nothing, and the bytes live
/// at once (the heap's share of the peak RSS).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);
static PEAK_BYTES: AtomicU64 = AtomicU64::new(0);

fn grew(bytes: usize) {
    let live = LIVE_BYTES.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
    PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: forwards to the system allocator unchanged; only counts calls and bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        grew(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        grew(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        grew(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Ids the pseudo-random prompts draw from: below 150000 (Qwen's special ids start at
/// 151643) and inside a smaller vocabulary. Set once from the loaded model.
static TOKEN_BOUND: AtomicU64 = AtomicU64::new(150_000);

/// Deterministic pseudo-random token ids (xorshift), kept away from the special ids.
fn tokens(n: usize, seed: u64) -> Vec<u32> {
    let bound = TOKEN_BOUND.load(Ordering::Relaxed);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % bound) as u32
        })
        .collect()
}

/// Tokens per second of one layer's gated delta rule over a `rows`-token prefill from a zero
/// state, chunked and recurrent (median of five runs each, alternating), on conv-output-shaped
/// inputs.
fn delta_rule_tok_s(shape: DeltaShape, rows: usize) -> (f64, f64) {
    let noise = |len: usize, seed: u64| -> Vec<f32> {
        tokens(len, seed)
            .into_iter()
            .map(|t| (t % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    };
    let qkv = noise(rows * shape.qkv_width(), 11);
    let b = noise(rows * shape.value_heads, 12);
    let a = noise(rows * shape.value_heads, 13);
    let a_log = noise(shape.value_heads, 14);
    let dt_bias = noise(shape.value_heads, 15);
    let mut out = vec![0f32; rows * shape.value_heads * shape.value_dim];
    let devices = [
        CpuDevice::new().with_delta_rule(DeltaRuleForm::Chunked),
        CpuDevice::new().with_delta_rule(DeltaRuleForm::Recurrent),
    ];
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..5 {
        for (dev, t) in devices.iter().zip(&mut times) {
            let mut state = vec![0f32; shape.state_len()];
            let started = Instant::now();
            dev.gated_delta_rule(
                &qkv, &b, &a, rows, shape, &a_log, &dt_bias, &mut state, &mut out,
            );
            t.push(started.elapsed().as_secs_f64());
        }
    }
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        rows as f64 / t[t.len() / 2]
    };
    let [mut c, mut r] = times;
    (median(&mut c), median(&mut r))
}

/// CPU seconds this process has used (all threads, user + system): on a machine other jobs
/// load, tokens per CPU-second compare two runs better than tokens per wall second.
fn cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(root) = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with("--") && !a.chars().all(|c| c.is_ascii_digit()))
    else {
        eprintln!("usage: engine_bench ROOT [--prefill N] [--decode N] [--steps N]");
        std::process::exit(2);
    };
    let root = PathBuf::from(root);
    let prefill_len = arg(&args, "--prefill", 512);
    let decode_len = arg(&args, "--decode", 32);
    let steps = arg(&args, "--steps", 40);

    let started = Instant::now();
    let mut engine = match Engine::load(&root, DeviceChoice::Cpu) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("load: {e}");
            std::process::exit(1);
        }
    };
    let load_s = started.elapsed().as_secs_f64();
    let rss_after_load = rss_kib("VmRSS:");
    let peak_rss_load = rss_kib("VmHWM:");
    let (anon_after_load, file_after_load) = (rss_kib("RssAnon:"), rss_kib("RssFile:"));
    let heap_after_load = LIVE_BYTES.load(Ordering::Relaxed);
    let peak_heap_load = PEAK_BYTES.load(Ordering::Relaxed);
    // A bound the torch side (bench.py) computes the same way from config.json.
    TOKEN_BOUND.store(
        150_000.min(engine.config().vocab_size.saturating_sub(64).max(1)) as u64,
        Ordering::Relaxed,
    );
    let adapter = if engine.adapters().is_empty() {
        None
    } else {
        Some(0)
    };
    let greedy = |prompt: Vec<u32>, adapter: Option<usize>, max_tokens: usize| GenerateRequest {
        prompt,
        adapter,
        sampling: SamplingParams::greedy(),
        max_tokens,
        stop_ids: Vec::new(),
        constraint: None,
    };
    let run = |engine: &mut Engine, req: &GenerateRequest| {
        engine.clear_cache();
        engine
            .generate(req, &mut |_| true)
            .map_err(|e| e.to_string())
    };

    // Last-position logits of a short prompt, for the side-by-side exactness check.
    if let Some(dir) = args
        .iter()
        .position(|a| a == "--dump")
        .and_then(|i| args.get(i + 1))
    {
        for (label, which) in [("base", None), ("adapter", adapter)] {
            let logits = match engine.logits(&tokens(16, 1), which) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("logits: {e}");
                    std::process::exit(1);
                }
            };
            let bytes: Vec<u8> = logits
                .last()
                .into_iter()
                .flatten()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            if let Err(e) = std::fs::write(PathBuf::from(dir).join(format!("{label}.f32")), bytes) {
                eprintln!("{dir}: {e}");
                std::process::exit(1);
            }
        }
    }

    let mut report = serde_json::Map::new();
    let mut insert = |k: &str, v: serde_json::Value| {
        report.insert(k.to_string(), v);
    };
    insert("device", engine.device_name().into());
    insert("load_s", load_s.into());
    for (label, which) in [("base", None), ("adapter", adapter)] {
        if label == "adapter" && which.is_none() {
            continue;
        }
        // Warm-up (page faults, thread pools), then the measured runs.
        let _ = run(&mut engine, &greedy(tokens(16, 1), which, 2));
        let cpu_before = cpu_s();
        let out = match run(&mut engine, &greedy(tokens(prefill_len, 2), which, 1)) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("prefill: {e}");
                std::process::exit(1);
            }
        };
        insert(
            &format!("{label}_prefill_peak_rss_bytes"),
            (rss_kib("VmHWM:") * 1024).into(),
        );
        insert(
            &format!("{label}_prefill_tok_s"),
            (prefill_len as f64 / out.prefill_time.as_secs_f64()).into(),
        );
        // The whole request's CPU time: the prefill and one lm_head product.
        insert(
            &format!("{label}_prefill_tok_per_cpu_s"),
            (prefill_len as f64 / (cpu_s() - cpu_before).max(1e-9)).into(),
        );
        // The decode steps' CPU time: a run to `decode_len + 1` tokens less one that stops
        // after the prefill of the same prompt.
        let cpu_before = cpu_s();
        let _ = run(&mut engine, &greedy(tokens(32, 3), which, 1));
        let prefill_cpu = cpu_s() - cpu_before;
        let cpu_before = cpu_s();
        let out = match run(&mut engine, &greedy(tokens(32, 3), which, decode_len + 1)) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("decode: {e}");
                std::process::exit(1);
            }
        };
        insert(
            &format!("{label}_decode_tok_per_cpu_s"),
            (out.tokens.len().saturating_sub(1) as f64
                / (cpu_s() - cpu_before - prefill_cpu).max(1e-9))
            .into(),
        );
        // The first new token comes from the prefill's logits; each later one costs one step.
        let steps_run = out.tokens.len().saturating_sub(1).max(1);
        insert(
            &format!("{label}_decode_tok_s"),
            (steps_run as f64 / out.decode_time.as_secs_f64()).into(),
        );
        insert(&format!("{label}_decode_tokens"), out.tokens.len().into());
        // Allocations of a short and a long greedy run from the same prompt: any difference is
        // per-token allocation in the decode loop.
        let mut count = |n: usize| {
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            let _ = run(&mut engine, &greedy(tokens(8, 5), which, n));
            ALLOCATIONS.load(Ordering::Relaxed) - before
        };
        let (short, long) = (count(3), count(11));
        insert(
            &format!("{label}_decode_allocations_per_token"),
            ((long as f64 - short as f64) / 8.0).into(),
        );
    }

    // Agent loop: a growing conversation on one expert; each step re-sends everything before it
    // plus the model's last answer and 30 new tokens (a tool result). "New" tokens are those the
    // model has not computed yet: the first prompt, then each step's appended 30.
    let mut conversation = tokens(300, 4);
    let mut new_tokens = conversation.len();
    let (mut prefilled, mut growth, mut previous_len) = (0usize, 0usize, 0usize);
    engine.clear_cache();
    let loop_started = Instant::now();
    for step in 0..steps {
        let out = match engine.generate(&greedy(conversation.clone(), adapter, 4), &mut |_| true) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("agent step {step}: {e}");
                std::process::exit(1);
            }
        };
        prefilled += out.prompt_tokens - out.cached_tokens;
        growth += conversation.len() - previous_len;
        previous_len = conversation.len();
        if step + 1 < steps {
            conversation.extend_from_slice(&out.tokens);
            let appended = tokens(30, 100 + step as u64);
            new_tokens += appended.len();
            conversation.extend(appended);
        }
    }
    insert("agent_steps", steps.into());
    insert("agent_prefilled_tokens", prefilled.into());
    insert("agent_new_tokens", new_tokens.into());
    insert("agent_prompt_growth_tokens", growth.into());
    insert(
        "agent_prefill_ratio",
        (prefilled as f64 / new_tokens.max(1) as f64).into(),
    );
    insert("agent_loop_s", loop_started.elapsed().as_secs_f64().into());

    // The gated delta rule alone at the model's linear-attention shape, both prefill forms
    // alternately (the whole model's prefill time is mostly the experts' GEMMs).
    if let Some(h) = engine.config().hybrid.as_ref() {
        let shape = DeltaShape {
            key_heads: h.linear_key_heads,
            value_heads: h.linear_value_heads,
            key_dim: h.linear_key_head_dim,
            value_dim: h.linear_value_head_dim,
        };
        let (chunked, recurrent) = delta_rule_tok_s(shape, prefill_len);
        insert("delta_rule_chunked_tok_s", chunked.into());
        insert("delta_rule_recurrent_tok_s", recurrent.into());
    }

    let memory = engine.memory();
    let config = engine.config();
    // KV lives in the full-attention layers only (all of a dense model's).
    let kv_layers = config
        .hybrid
        .as_ref()
        .map_or(config.num_hidden_layers, |h| {
            (0..config.num_hidden_layers)
                .filter(|l| h.kv_slot(*l).is_some())
                .count()
        });
    let kv_bytes_per_token = 2 * kv_layers * config.kv_dim() * 4;
    insert("weights_bytes", memory.weights.into());
    insert("adapters_bytes", memory.adapters.into());
    insert("kv_cache_bytes", memory.kv_cache.into());
    insert("kv_bytes_per_token", kv_bytes_per_token.into());
    insert("rss_after_load_bytes", (rss_after_load * 1024).into());
    insert("peak_rss_during_load_bytes", (peak_rss_load * 1024).into());
    insert("peak_rss_bytes", (rss_kib("VmHWM:") * 1024).into());
    insert("rss_anon_after_load_bytes", (anon_after_load * 1024).into());
    insert("rss_file_after_load_bytes", (file_after_load * 1024).into());
    insert("rss_anon_end_bytes", (rss_kib("RssAnon:") * 1024).into());
    insert("rss_file_end_bytes", (rss_kib("RssFile:") * 1024).into());
    insert("heap_after_load_bytes", heap_after_load.into());
    insert("peak_heap_during_load_bytes", peak_heap_load.into());
    insert("peak_heap_bytes", PEAK_BYTES.load(Ordering::Relaxed).into());
    println!("{}", serde_json::Value::Object(report));
}
