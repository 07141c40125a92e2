//! The CUDA benchmark body (batch 1, random weights with real Qwen3 shapes made by
//! make_models.py): decode tokens/s for the base model and with a rank-64 adapter on every
//! module, prefill tokens/s for a 2k-token prompt, time to route (a prompt forward plus one
//! step), and the memory-bandwidth roofline (weight bytes / measured device-to-device copy
//! bandwidth). One JSON line per model on stdout; tools/gpu-check.sh tabulates them beside the
//! HF+PEFT baseline. A module of tests/cuda_kernels.rs, run as its #[ignore]d `cuda_benchmark`
//! test, so tools/gpu-check.sh needs only the one test binary on a GPU machine. A hybrid
//! (Qwen3.5-MoE, e.g. the Tall-shaped random model) is measured the same way; its roofline
//! counts the bytes one token reads: everything but the embedding table and the routed
//! experts, plus `experts_per_token` of the experts of each layer.

use std::path::Path;
use std::time::Instant;

use baton::engine::ModelConfig;
use baton::engine::device::Device;
use baton::engine::device::cuda::CudaDevice;
use baton::engine::hybrid::{HybridState, HybridWorkspace, Qwen35Moe};
use baton::engine::hybrid_lora::HybridLora;
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

/// Seconds to prefill `prompt` into a fresh hybrid state (returned) and read the last logits.
fn hybrid_prefill(
    dev: &CudaDevice,
    model: &Qwen35Moe<CudaDevice>,
    ws: &mut HybridWorkspace<CudaDevice>,
    prompt: &[u32],
    room: usize,
    adapter: Option<&HybridLora<CudaDevice>>,
    logits: &mut Vec<f32>,
) -> Result<(f64, HybridState<CudaDevice>), String> {
    let mut state = model
        .new_state(dev, prompt.len() + room)
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut last = 0;
    for chunk in prompt.chunks(PREFILL_CHUNK) {
        model
            .forward(dev, ws, &mut state, chunk, adapter)
            .map_err(|e| e.to_string())?;
        last = chunk.len() - 1;
    }
    model
        .logits_of_row(dev, ws, last, logits)
        .map_err(|e| e.to_string())?;
    Ok((t.elapsed().as_secs_f64(), state))
}

/// Greedy decode tokens/s of a hybrid model after `prompt`.
fn hybrid_decode(
    dev: &CudaDevice,
    model: &Qwen35Moe<CudaDevice>,
    ws: &mut HybridWorkspace<CudaDevice>,
    prompt: &[u32],
    adapter: Option<&HybridLora<CudaDevice>>,
) -> Result<f64, String> {
    let mut logits = Vec::new();
    let (_, mut state) = hybrid_prefill(
        dev,
        model,
        ws,
        prompt,
        DECODE_STEPS + 1,
        adapter,
        &mut logits,
    )?;
    let t = Instant::now();
    for _ in 0..DECODE_STEPS {
        let next = argmax(&logits);
        model
            .forward(dev, ws, &mut state, &[next], adapter)
            .map_err(|e| e.to_string())?;
        model
            .logits_of_row(dev, ws, 0, &mut logits)
            .map_err(|e| e.to_string())?;
    }
    Ok(DECODE_STEPS as f64 / t.elapsed().as_secs_f64())
}

/// Benchmarks a hybrid (Qwen3.5-MoE) model under `root` (base/, and loras/L0 when present).
pub fn run_hybrid(
    dev: &CudaDevice,
    label: &str,
    root: &Path,
    config: &ModelConfig,
    bandwidth: f64,
) -> Result<String, String> {
    let Some(h) = config.hybrid.as_ref() else {
        return Err(format!("{label}: not a hybrid model"));
    };
    let base = root.join("base");
    let t = Instant::now();
    let weights = WeightFiles::open_dir(&base).map_err(|e| e.to_string())?;
    let model = Qwen35Moe::load(dev, config, &weights).map_err(|e| e.to_string())?;
    drop(weights);
    let lora_dir = root.join("loras").join("L0");
    let adapter = if lora_dir.is_dir() {
        Some(HybridLora::load(dev, "L0", &lora_dir, config).map_err(|e| e.to_string())?)
    } else {
        None
    };
    let load_s = t.elapsed().as_secs_f64();
    let max_rank = adapter.as_ref().map_or(0, HybridLora::max_rank);
    let mut ws = model.workspace(dev, max_rank).map_err(|e| e.to_string())?;
    let prompt = tokens(PREFILL_TOKENS, config.vocab_size, 7);
    let mut logits = Vec::new();
    // Warm-up (kernel JIT, cuBLAS heuristics), then the measured runs.
    hybrid_prefill(dev, &model, &mut ws, &prompt[..300], 1, None, &mut logits)?;
    let (prefill_s, _) = hybrid_prefill(dev, &model, &mut ws, &prompt, 1, None, &mut logits)?;
    let prefill_lora_s = match &adapter {
        Some(a) => Some(hybrid_prefill(dev, &model, &mut ws, &prompt, 1, Some(a), &mut logits)?.0),
        None => None,
    };
    let short = &prompt[..32];
    hybrid_decode(dev, &model, &mut ws, short, None)?; // warm-up of the decode path
    let decode_base = hybrid_decode(dev, &model, &mut ws, short, None)?;
    let decode_lora = match &adapter {
        Some(a) => Some(hybrid_decode(dev, &model, &mut ws, short, Some(a))?),
        None => None,
    };
    // Bytes one decode step reads: all weights but the embedding table (one row) and the
    // routed experts not chosen (bf16: 2 bytes a weight).
    let weight_bytes = model.weight_bytes() as f64;
    let hidden = config.hidden_size as f64;
    let expert = 3.0 * h.moe_intermediate_size as f64 * hidden * 2.0;
    let layers = config.num_hidden_layers as f64;
    let embed = if config.tie_word_embeddings {
        0.0 // the table is also the head, read whole
    } else {
        config.vocab_size as f64 * hidden * 2.0
    };
    let unused = layers * (h.num_experts - h.experts_per_token) as f64 * expert;
    let active_bytes = weight_bytes - embed - unused;
    Ok(serde_json::json!({
        "engine": "baton",
        "model": label,
        "device": dev.name(),
        "load_s": load_s,
        "layers": config.num_hidden_layers,
        "weight_bytes": weight_bytes,
        "active_bytes": active_bytes,
        "lora_bytes": adapter.as_ref().map(|a| a.bytes(dev)),
        "copy_bandwidth_gbs": bandwidth / 1e9,
        "roofline_decode_tok_s": bandwidth / active_bytes,
        "decode_tok_s": decode_base,
        "decode_lora_tok_s": decode_lora,
        "prefill_tokens": PREFILL_TOKENS,
        "prefill_tok_s": PREFILL_TOKENS as f64 / prefill_s,
        "prefill_lora_tok_s": prefill_lora_s.map(|s| PREFILL_TOKENS as f64 / s),
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
        let root = Path::new(dir);
        let result = match ModelConfig::load(&root.join("base")) {
            Ok(config) if config.hybrid.is_some() => {
                run_hybrid(&dev, label, root, &config, bandwidth)
            }
            Ok(_) => run_one(&dev, label, root, bandwidth),
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(line) => println!("BENCH {line}"),
            Err(e) => println!(
                "BENCH {}",
                serde_json::json!({"engine": "baton", "model": label, "error": e})
            ),
        }
    }
    Ok(())
}
