//! The CUDA benchmark body (batch 1, random weights with real Qwen3 shapes made by
//! make_models.py): decode tokens/s for the base model and with a rank-64 adapter on every
//! module, prefill tokens/s for a 2k-token prompt, time to route (a prompt forward plus one
//! step), and the memory-bandwidth roofline (weight bytes / measured device-to-device copy
//! bandwidth). One JSON line per model on stdout; tools/gpu-check.sh tabulates them beside the
//! HF+PEFT baseline. A module of tests/cuda_kernels.rs, run as its #[ignore]d `cuda_benchmark`
//! test, so tools/gpu-check.sh needs only the one test binary on a GPU machine.

use std::path::Path;
use std::time::Instant;

use baton::engine::ModelConfig;
use baton::engine::device::Device;
use baton::engine::device::cuda::CudaDevice;
use baton::engine::lora::LoraAdapter;
use baton::engine::model::{PREFILL_CHUNK, Qwen3, Workspace};
use baton::engine::weights::WeightFiles;

const PREFILL_TOKENS: usize = 2048;
const ROUTE_TOKENS: usize = 1024;
const DECODE_STEPS: usize = 128;

fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab.min(150_000) as u64) as u32
        })
        .collect()
}

/// Seconds to prefill `prompt` from position 0 and read the last logits.
fn prefill(
    dev: &CudaDevice,
    model: &Qwen3<CudaDevice>,
    ws: &mut Workspace<CudaDevice>,
    kv: &mut <CudaDevice as Device>::Kv,
    prompt: &[u32],
    adapter: Option<&LoraAdapter<CudaDevice>>,
    logits: &mut Vec<f32>,
) -> Result<f64, String> {
    let t = Instant::now();
    let mut last = 0;
    for (i, chunk) in prompt.chunks(PREFILL_CHUNK).enumerate() {
        model.forward(dev, ws, kv, i * PREFILL_CHUNK, chunk, adapter);
        last = chunk.len() - 1;
    }
    model
        .logits_of_row(dev, ws, last, logits)
        .map_err(|e| e.to_string())?;
    Ok(t.elapsed().as_secs_f64())
}

fn argmax(v: &[f32]) -> u32 {
    v.iter()
        .enumerate()
        .fold((0usize, f32::NEG_INFINITY), |b, (i, x)| {
            if *x > b.1 { (i, *x) } else { b }
        })
        .0 as u32
}

/// Tokens/s of greedy decoding after `prompt` (host argmax over read-back logits, as the
/// engine does today).
fn decode(
    dev: &CudaDevice,
    model: &Qwen3<CudaDevice>,
    ws: &mut Workspace<CudaDevice>,
    prompt: &[u32],
    adapter: Option<&LoraAdapter<CudaDevice>>,
) -> Result<f64, String> {
    let mut kv = dev
        .kv_alloc(model.kv_shape(), prompt.len() + DECODE_STEPS + 1)
        .map_err(|e| e.to_string())?;
    let mut logits = Vec::new();
    prefill(dev, model, ws, &mut kv, prompt, adapter, &mut logits)?;
    let t = Instant::now();
    for step in 0..DECODE_STEPS {
        let next = argmax(&logits);
        model.forward(dev, ws, &mut kv, prompt.len() + step, &[next], adapter);
        model
            .logits_of_row(dev, ws, 0, &mut logits)
            .map_err(|e| e.to_string())?;
    }
    Ok(DECODE_STEPS as f64 / t.elapsed().as_secs_f64())
}

/// Device-to-device copy bandwidth in bytes/s (read + write), 1 GiB each way.
fn copy_bandwidth(dev: &CudaDevice) -> Result<f64, String> {
    let n = 1usize << 28;
    let src = dev.buffer(n).map_err(|e| e.to_string())?;
    let mut dst = dev.buffer(n).map_err(|e| e.to_string())?;
    let mut sink = Vec::new();
    dev.copy(&src, 0, n, &mut dst);
    dev.read(&dst, 1, &mut sink).map_err(|e| e.to_string())?;
    let reps = 10;
    let t = Instant::now();
    for _ in 0..reps {
        dev.copy(&src, 0, n, &mut dst);
    }
    dev.read(&dst, 1, &mut sink).map_err(|e| e.to_string())?;
    Ok((2 * n * 4 * reps) as f64 / t.elapsed().as_secs_f64())
}

/// Benchmarks the model under `root` (base/ and loras/L0) and returns its JSON line.
pub fn run_one(
    dev: &CudaDevice,
    label: &str,
    root: &Path,
    bandwidth: f64,
) -> Result<String, String> {
    let base = root.join("base");
    let config = ModelConfig::load(&base).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let weights = WeightFiles::open_dir(&base).map_err(|e| e.to_string())?;
    let model = Qwen3::load(dev, &config, &weights).map_err(|e| e.to_string())?;
    drop(weights);
    let adapter = LoraAdapter::load(dev, "L0", &root.join("loras").join("L0"), &config)
        .map_err(|e| e.to_string())?;
    let load_s = t.elapsed().as_secs_f64();
    let mut ws = model
        .workspace(dev, adapter.max_rank())
        .map_err(|e| e.to_string())?;
    let prompt = tokens(PREFILL_TOKENS, config.vocab_size, 7);
    let mut logits = Vec::new();

    // Warm-up (kernel JIT, cuBLAS heuristics), then the measured runs.
    let mut kv = dev
        .kv_alloc(model.kv_shape(), PREFILL_TOKENS + 1)
        .map_err(|e| e.to_string())?;
    prefill(
        dev,
        &model,
        &mut ws,
        &mut kv,
        &prompt[..512],
        Some(&adapter),
        &mut logits,
    )?;
    let prefill_s = prefill(dev, &model, &mut ws, &mut kv, &prompt, None, &mut logits)?;
    let prefill_lora_s = prefill(
        dev,
        &model,
        &mut ws,
        &mut kv,
        &prompt,
        Some(&adapter),
        &mut logits,
    )?;
    let route_s = {
        let p = &prompt[..ROUTE_TOKENS];
        let s = prefill(
            dev,
            &model,
            &mut ws,
            &mut kv,
            p,
            Some(&adapter),
            &mut logits,
        )?;
        let t = Instant::now();
        model.forward(
            dev,
            &mut ws,
            &mut kv,
            p.len(),
            &[argmax(&logits)],
            Some(&adapter),
        );
        model
            .logits_of_row(dev, &mut ws, 0, &mut logits)
            .map_err(|e| e.to_string())?;
        s + t.elapsed().as_secs_f64()
    };
    drop(kv);
    let short = &prompt[..32];
    decode(dev, &model, &mut ws, short, None)?; // warm-up of the decode path
    let decode_base = decode(dev, &model, &mut ws, short, None)?;
    let decode_lora = decode(dev, &model, &mut ws, short, Some(&adapter))?;

    let weight_bytes = model.weight_bytes(dev) as f64;
    let lora_bytes = adapter.bytes(dev) as f64;
    let roofline = bandwidth / weight_bytes;
    Ok(serde_json::json!({
        "engine": "baton",
        "model": label,
        "device": dev.name(),
        "load_s": load_s,
        "weight_bytes": weight_bytes,
        "lora_bytes": lora_bytes,
        "copy_bandwidth_gbs": bandwidth / 1e9,
        "roofline_decode_tok_s": roofline,
        "decode_tok_s": decode_base,
        "decode_lora_tok_s": decode_lora,
        "prefill_tok_s": PREFILL_TOKENS as f64 / prefill_s,
        "prefill_lora_tok_s": PREFILL_TOKENS as f64 / prefill_lora_s,
        "route_ms": route_s * 1e3,
        "route_prompt_tokens": ROUTE_TOKENS,
    })
    .to_string())
}

/// Runs every `label=dir` pair in BATON_BENCH_MODELS (space-separated), printing JSON lines.
pub fn run() -> Result<(), String> {
    let spec = std::env::var("BATON_BENCH_MODELS")
        .map_err(|_| "set BATON_BENCH_MODELS='0.6B=/path/to/root ...' (tools/gpu-check.sh does)")?;
    let dev = baton::engine::device::cuda::open(0).map_err(|e| e.to_string())?;
    let bandwidth = copy_bandwidth(&dev)?;
    for item in spec.split_whitespace() {
        let (label, dir) = item
            .split_once('=')
            .ok_or_else(|| format!("BATON_BENCH_MODELS item {item:?} is not label=dir"))?;
        match run_one(&dev, label, Path::new(dir), bandwidth) {
            Ok(line) => println!("BENCH {line}"),
            Err(e) => println!(
                "BENCH {}",
                serde_json::json!({"engine": "baton", "model": label, "error": e})
            ),
        }
    }
    Ok(())
}
