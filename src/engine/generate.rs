//! `Engine`: loads a base model and its LoRA experts onto a device and serves requests —
//! prefill with per-adapter prefix reuse, decode with sampling and stop ids, and constrained
//! choice (routing = one prefill + one step per branching token).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::config::ModelConfig;
use super::constraint::TokenTrie;
use super::device::Device;
use super::device::cpu::{CpuDevice, DeltaRuleForm, WeightPrecision};
use super::error::EngineError;
use super::hybrid_runner::HybridCore;
use super::kv::{CacheLimits, CacheStats, KvEntry, PrefixCache};
use super::lora::LoraAdapter;
use super::model::{PREFILL_CHUNK, Qwen3, Workspace};
use super::sampler::{Sampler, SamplingParams};
use super::weights::WeightFiles;
use crate::protocol::DeviceChoice;

/// Knobs of an engine beyond the files and the device.
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineOptions {
    pub cache: CacheLimits,
    /// How the CPU device keeps weights; None = `BATON_CPU_WEIGHTS` (bf16 unless "f32").
    pub cpu_weights: Option<WeightPrecision>,
    /// The CPU's prefill form of the gated delta rule; None = `BATON_CPU_DELTA_RULE`
    /// (chunked unless "recurrent").
    pub cpu_delta_rule: Option<DeltaRuleForm>,
}

/// One generation request.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    /// Index into `Engine::adapters()`; None = the base model.
    pub adapter: Option<usize>,
    pub sampling: SamplingParams,
    /// New tokens at most (a constraint always completes its option regardless).
    pub max_tokens: usize,
    /// Extra stop ids, on top of the model's `eos_token_ids`. A stop token ends the generation
    /// and is not part of the output.
    pub stop_ids: Vec<u32>,
    /// Allowed token sequences; when set, the output is exactly one of them.
    pub constraint: Option<Vec<Vec<u32>>>,
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishKind {
    /// A stop id was sampled.
    Stop,
    /// `max_tokens` or the context window was reached.
    Length,
    /// The constraint's option is complete.
    Constraint,
    /// The token callback asked to stop.
    Cancelled,
}

/// The result of a generation.
#[derive(Debug, Clone)]
pub struct GenerateOutput {
    pub tokens: Vec<u32>,
    pub finish: FinishKind,
    pub prompt_tokens: usize,
    /// Prompt positions whose K/V came from the prefix cache (not prefilled).
    pub cached_tokens: usize,
    pub prefill_time: Duration,
    pub decode_time: Duration,
    /// With a constraint: each option's log-probability, summed over its tokens (for an option
    /// that leaves the chosen path early, over its tokens up to and including the first that
    /// differs: later positions were never computed).
    pub choice_logprobs: Option<Vec<f32>>,
    /// With a constraint: the index of the chosen option.
    pub choice: Option<usize>,
}

/// Last-position logits of a prompt run through the prefix cache.
#[derive(Debug, Clone)]
pub struct PromptLogits {
    pub logits: Vec<f32>,
    pub cached_tokens: usize,
    pub prefilled_tokens: usize,
}

/// Device memory held by the engine, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReport {
    pub weights: usize,
    pub adapters: usize,
    pub kv_cache: usize,
}

/// A loaded model with its adapters on one device.
pub struct Engine {
    /// Why `auto` runs on the CPU (no CUDA driver, library or device), for the caller to show.
    fallback_reason: Option<String>,
    root: PathBuf,
    config: ModelConfig,
    adapter_names: Vec<String>,
    runner: Box<dyn Runner>,
}

impl Engine {
    /// Loads `ROOT/base` and every folder under `ROOT/loras` as an adapter (sorted by name; no
    /// `loras` folder means the base model only; a folder that is not a PEFT adapter is an error,
    /// so a broken expert never silently shifts the others' indices).
    pub fn load(root: &Path, device: DeviceChoice) -> Result<Engine, EngineError> {
        Engine::load_with(root, device, EngineOptions::default())
    }

    pub fn load_with(
        root: &Path,
        device: DeviceChoice,
        options: EngineOptions,
    ) -> Result<Engine, EngineError> {
        let hybrid = ModelConfig::load(&root.join("base"))?.hybrid.is_some();
        let (gpu, fallback_reason) = match super::device::cuda::select(device)? {
            super::device::cuda::Selected::Cuda(dev) => (Some(dev), None),
            super::device::cuda::Selected::Cpu { fallback_reason } => (None, fallback_reason),
        };
        // The dense and the hybrid (Qwen3.5-MoE) model each run on either device.
        let runner: Box<dyn Runner> = match (gpu, hybrid) {
            (Some(dev), true) => Box::new(HybridCore::load(*dev, root, options)?),
            (Some(dev), false) => Box::new(Core::load(*dev, root, options)?),
            (None, true) => Box::new(HybridCore::load(cpu_device(&options), root, options)?),
            (None, false) => Box::new(Core::load(cpu_device(&options), root, options)?),
        };
        Ok(Engine {
            fallback_reason,
            root: root.to_path_buf(),
            config: runner.config().clone(),
            adapter_names: runner.adapter_names(),
            runner,
        })
    }

    /// Why `--device auto` fell back to the CPU, if it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Names of the loaded adapters in index order (their folder names).
    pub fn adapters(&self) -> Vec<String> {
        self.adapter_names.clone()
    }

    /// The index of the adapter called `name`.
    pub fn adapter_index(&self, name: &str) -> Option<usize> {
        self.adapter_names.iter().position(|n| n == name)
    }

    pub fn device_name(&self) -> String {
        self.runner.device_name()
    }

    /// Generates; `on_token` sees each new token as it is chosen and returns false to stop.
    pub fn generate(
        &mut self,
        req: &GenerateRequest,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        self.runner.generate(req, on_token)
    }

    /// Logits at every position of `tokens`, from a cold run (the prefix cache is not used).
    pub fn logits(
        &mut self,
        tokens: &[u32],
        adapter: Option<usize>,
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        self.runner.logits(tokens, adapter)
    }

    /// Last-position logits of `tokens` through the prefix cache, and how much was reused.
    pub fn prompt_logits(
        &mut self,
        tokens: &[u32],
        adapter: Option<usize>,
    ) -> Result<PromptLogits, EngineError> {
        self.runner.prompt_logits(tokens, adapter)
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.runner.cache_stats()
    }

    pub fn clear_cache(&mut self) {
        self.runner.clear_cache();
    }

    pub fn memory(&self) -> MemoryReport {
        self.runner.memory()
    }
}

fn cpu_device(options: &EngineOptions) -> CpuDevice {
    CpuDevice::with_precision(
        options
            .cpu_weights
            .unwrap_or_else(WeightPrecision::from_env),
    )
    .with_delta_rule(
        options
            .cpu_delta_rule
            .unwrap_or_else(DeltaRuleForm::from_env),
    )
}

/// The device-independent face of `Core<D>`, so `Engine` need not be generic.
pub(super) trait Runner: Send {
    fn config(&self) -> &ModelConfig;
    fn adapter_names(&self) -> Vec<String>;
    fn device_name(&self) -> String;
    fn generate(
        &mut self,
        req: &GenerateRequest,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<GenerateOutput, EngineError>;
    fn logits(
        &mut self,
        tokens: &[u32],
        adapter: Option<usize>,
    ) -> Result<Vec<Vec<f32>>, EngineError>;
    fn prompt_logits(
        &mut self,
        tokens: &[u32],
        adapter: Option<usize>,
    ) -> Result<PromptLogits, EngineError>;
    fn cache_stats(&self) -> CacheStats;
    fn clear_cache(&mut self);
    fn memory(&self) -> MemoryReport;
}

/// Model, adapters, buffers and cache on one device.
struct Core<D: Device> {
    dev: D,
    model: Qwen3<D>,
    adapters: Vec<LoraAdapter<D>>,
    ws: Workspace<D>,
    cache: PrefixCache<D>,
    /// Logits of the latest position, on the host.
    logits: Vec<f32>,
}

impl<D: Device> Core<D> {
    fn load(dev: D, root: &Path, options: EngineOptions) -> Result<Core<D>, EngineError> {
        let base = root.join("base");
        let config = ModelConfig::load(&base)?;
        let weights = WeightFiles::open_dir(&base)?;
        let model = Qwen3::load(&dev, &config, &weights)?;
        drop(weights);
        let adapters = adapter_dirs(root)?
            .iter()
            .map(|(name, dir)| LoraAdapter::load(&dev, name, dir, &config))
            .collect::<Result<Vec<_>, _>>()?;
        let max_rank = adapters
            .iter()
            .map(LoraAdapter::max_rank)
            .max()
            .unwrap_or(0);
        let ws = model.workspace(&dev, max_rank)?;
        Ok(Core {
            dev,
            model,
            adapters,
            ws,
            cache: PrefixCache::new(options.cache),
            logits: Vec::new(),
        })
    }

    fn check(&self, tokens: &[u32], adapter: Option<usize>) -> Result<(), EngineError> {
        check_request(self.model.config(), self.adapters.len(), tokens, adapter)
    }
}

/// Checks a prompt and adapter index against a model.
pub(super) fn check_request(
    c: &ModelConfig,
    adapters: usize,
    tokens: &[u32],
    adapter: Option<usize>,
) -> Result<(), EngineError> {
    {
        if tokens.is_empty() {
            return Err(EngineError::Request("the prompt has no tokens".into()));
        }
        if let Some(bad) = tokens.iter().find(|t| **t as usize >= c.vocab_size) {
            return Err(EngineError::Request(format!(
                "token id {bad} is outside the vocabulary of {}",
                c.vocab_size
            )));
        }
        if tokens.len() > c.max_position_embeddings {
            return Err(EngineError::Request(format!(
                "the prompt has {} tokens, the context window is {}",
                tokens.len(),
                c.max_position_embeddings
            )));
        }
        if let Some(a) = adapter
            && a >= adapters
        {
            return Err(EngineError::Request(format!(
                "adapter index {a} does not exist ({adapters} loaded)"
            )));
        }
        Ok(())
    }
}

impl<D: Device> Core<D> {
    /// Runs `tokens[entry.tokens.len()..]` into `entry` and leaves the last position's logits
    /// in `self.logits`.
    fn prefill(
        &mut self,
        entry: &mut KvEntry<D>,
        tokens: &[u32],
        adapter: Option<usize>,
    ) -> Result<(), EngineError> {
        let Core {
            dev,
            model,
            adapters,
            ws,
            logits,
            ..
        } = self;
        let adapter = adapter.map(|a| &adapters[a]);
        let mut start = entry.tokens.len();
        for chunk in tokens[start..].chunks(PREFILL_CHUNK) {
            model.forward(dev, ws, &mut entry.kv, start, chunk, adapter);
            entry.tokens.extend_from_slice(chunk);
            start += chunk.len();
            if start == tokens.len() {
                model.logits_of_row(dev, ws, chunk.len() - 1, logits)?;
            }
        }
        Ok(())
    }

    /// Appends one token to `entry` and leaves its logits in `self.logits`.
    fn step(
        &mut self,
        entry: &mut KvEntry<D>,
        token: u32,
        adapter: Option<usize>,
    ) -> Result<(), EngineError> {
        let Core {
            dev,
            model,
            adapters,
            ws,
            logits,
            ..
        } = self;
        let adapter = adapter.map(|a| &adapters[a]);
        let position = entry.tokens.len();
        if position >= dev.kv_capacity(&entry.kv) {
            dev.kv_grow(&mut entry.kv, position + 1)?;
        }
        model.forward(dev, ws, &mut entry.kv, position, &[token], adapter);
        entry.tokens.push(token);
        model.logits_of_row(dev, ws, 0, logits)
    }
}

/// The adapters of a model folder: its `loras/NAME/` folders, by name.
pub(super) fn adapter_dirs(root: &Path) -> Result<Vec<(String, PathBuf)>, EngineError> {
    let loras = root.join("loras");
    if !loras.is_dir() {
        return Ok(Vec::new());
    }
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(&loras).map_err(|e| EngineError::io(&loras, e))? {
        let path = entry.map_err(|e| EngineError::io(&loras, e))?.path();
        if path.is_dir() {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            dirs.push((name, path));
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// How a request's sampling ended: the finish, and for a constrained choice the answers'
/// log-probabilities and the one chosen.
pub(super) type Sampled = (FinishKind, Option<Vec<f32>>, Option<usize>);

/// What both runners do once a prompt is in: a constrained choice among `trie`'s answers,
/// nothing (`max_new` 0), or free sampling.
pub(super) fn sample(
    s: &mut dyn Stepper,
    req: &GenerateRequest,
    trie: Option<&TokenTrie>,
    eos: &[u32],
    max_new: usize,
    on_token: &mut dyn FnMut(u32) -> bool,
    out: &mut Vec<u32>,
) -> Result<Sampled, EngineError> {
    match trie {
        Some(t) => choose_loop(s, req, t, on_token, out).map(|(f, sc, c)| (f, Some(sc), c)),
        None if max_new == 0 => Ok((FinishKind::Length, None, None)),
        None => decode_loop(s, req, eos, max_new, on_token, out).map(|f| (f, None, None)),
    }
}

/// What the sampling loops need from a model: the latest position's logits and one more step.
pub(super) trait Stepper {
    fn logits(&self) -> &[f32];
    /// Runs `token` through the model; its logits become `logits()`.
    fn step(&mut self, token: u32) -> Result<(), EngineError>;
}

/// What a runner keeps per sequence and how it runs one, around the generate loop both
/// runners share ([`generate_with`]): the dense runner keeps a KV cache, the hybrid one a
/// recurrent state; checking the request, timing, sampling and keeping the sequence for the
/// next request that extends it are the same.
pub(super) trait Sequences {
    /// One sequence's state, taken from the runner's cache for a request and given back after.
    type Seq;
    fn model_config(&self) -> &ModelConfig;
    fn adapter_count(&self) -> usize;
    /// The cached sequence `prompt` extends (or a fresh one), with room for `capacity`
    /// tokens, and how many of the prompt's tokens it holds already.
    fn take_sequence(
        &mut self,
        adapter: Option<usize>,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<(Self::Seq, usize), EngineError>;
    /// Runs the prompt's tokens beyond what `seq` holds; the last position's logits become
    /// [`Sequences::last_logits`].
    fn run_prompt(
        &mut self,
        seq: &mut Self::Seq,
        prompt: &[u32],
        adapter: Option<usize>,
    ) -> Result<(), EngineError>;
    fn stepper<'a>(
        &'a mut self,
        seq: &'a mut Self::Seq,
        adapter: Option<usize>,
    ) -> impl Stepper + 'a;
    fn last_logits(&self) -> &[f32];
    /// Keeps a finished sequence for a later request that extends it.
    fn keep_sequence(&mut self, adapter: Option<usize>, seq: Self::Seq);
}

/// One request through a runner: prefill what its cache does not hold, then sample.
pub(super) fn generate_with<S: Sequences>(
    s: &mut S,
    req: &GenerateRequest,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<GenerateOutput, EngineError> {
    check_request(
        s.model_config(),
        s.adapter_count(),
        &req.prompt,
        req.adapter,
    )?;
    let (trie, max_new) = plan_request(s.model_config(), req)?;
    let started = Instant::now();
    let (mut seq, cached_tokens) =
        s.take_sequence(req.adapter, &req.prompt, req.prompt.len() + max_new)?;
    let result = s.run_prompt(&mut seq, &req.prompt, req.adapter);
    let prefill_time = started.elapsed();
    let decode_started = Instant::now();
    let mut tokens = Vec::with_capacity(max_new);
    let eos = s.model_config().eos_token_ids.clone();
    let outcome = result.and_then(|()| {
        let mut stepper = s.stepper(&mut seq, req.adapter);
        sample(
            &mut stepper,
            req,
            trie.as_ref(),
            &eos,
            max_new,
            on_token,
            &mut tokens,
        )
    });
    let decode_time = decode_started.elapsed();
    // A failed run leaves its sequence in an unknown state: it is dropped, not kept.
    let (finish, choice_logprobs, choice) = outcome?;
    s.keep_sequence(req.adapter, seq);
    Ok(GenerateOutput {
        tokens,
        finish,
        prompt_tokens: req.prompt.len(),
        cached_tokens,
        prefill_time,
        decode_time,
        choice_logprobs,
        choice,
    })
}

/// The last position's logits of `tokens` through a runner's cache, and how much it reused.
pub(super) fn prompt_logits_with<S: Sequences>(
    s: &mut S,
    tokens: &[u32],
    adapter: Option<usize>,
) -> Result<PromptLogits, EngineError> {
    check_request(s.model_config(), s.adapter_count(), tokens, adapter)?;
    let (mut seq, cached) = s.take_sequence(adapter, tokens, tokens.len())?;
    s.run_prompt(&mut seq, tokens, adapter)?;
    s.keep_sequence(adapter, seq);
    Ok(PromptLogits {
        logits: s.last_logits().to_vec(),
        cached_tokens: cached,
        prefilled_tokens: tokens.len() - cached,
    })
}

impl<D: Device> Sequences for Core<D> {
    type Seq = KvEntry<D>;

    fn model_config(&self) -> &ModelConfig {
        self.model.config()
    }

    fn adapter_count(&self) -> usize {
        self.adapters.len()
    }

    fn take_sequence(
        &mut self,
        adapter: Option<usize>,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<(KvEntry<D>, usize), EngineError> {
        let shape = self.model.kv_shape();
        let checkout = self
            .cache
            .checkout(&self.dev, shape, adapter, prompt, capacity)?;
        Ok((checkout.entry, checkout.reused))
    }

    fn run_prompt(
        &mut self,
        seq: &mut KvEntry<D>,
        prompt: &[u32],
        adapter: Option<usize>,
    ) -> Result<(), EngineError> {
        self.prefill(seq, prompt, adapter)
    }

    fn stepper<'a>(
        &'a mut self,
        seq: &'a mut KvEntry<D>,
        adapter: Option<usize>,
    ) -> impl Stepper + 'a {
        DenseStepper {
            core: self,
            entry: seq,
            adapter,
        }
    }

    fn last_logits(&self) -> &[f32] {
        &self.logits
    }

    fn keep_sequence(&mut self, _adapter: Option<usize>, seq: KvEntry<D>) {
        self.cache.checkin(&self.dev, seq);
    }
}

struct DenseStepper<'a, D: Device> {
    core: &'a mut Core<D>,
    entry: &'a mut KvEntry<D>,
    adapter: Option<usize>,
}

impl<D: Device> Stepper for DenseStepper<'_, D> {
    fn logits(&self) -> &[f32] {
        &self.core.logits
    }

    fn step(&mut self, token: u32) -> Result<(), EngineError> {
        self.core.step(self.entry, token, self.adapter)
    }
}

/// Samples up to `max_new` tokens, stopping at a stop id or when `on_token` says so.
pub(super) fn decode_loop(
    s: &mut dyn Stepper,
    req: &GenerateRequest,
    eos: &[u32],
    max_new: usize,
    on_token: &mut dyn FnMut(u32) -> bool,
    out: &mut Vec<u32>,
) -> Result<FinishKind, EngineError> {
    let mut sampler = Sampler::new(req.sampling);
    loop {
        if out.len() >= max_new {
            return Ok(FinishKind::Length);
        }
        let token = sampler.sample(s.logits());
        if eos.contains(&token) || req.stop_ids.contains(&token) {
            return Ok(FinishKind::Stop);
        }
        out.push(token);
        if !on_token(token) {
            return Ok(FinishKind::Cancelled);
        }
        if out.len() >= max_new {
            return Ok(FinishKind::Length);
        }
        s.step(token)?;
    }
}

/// Walks the constraint's trie: forced tokens are appended, branches are sampled among the
/// allowed tokens; returns the finish, each option's summed log-probability and the choice.
pub(super) fn choose_loop(
    s: &mut dyn Stepper,
    req: &GenerateRequest,
    trie: &TokenTrie,
    on_token: &mut dyn FnMut(u32) -> bool,
    out: &mut Vec<u32>,
) -> Result<(FinishKind, Vec<f32>, Option<usize>), EngineError> {
    let mut sampler = Sampler::new(req.sampling);
    let options = trie.options();
    let mut scores = vec![0f32; options.len()];
    let mut on_path = vec![true; options.len()];
    let mut allowed = Vec::new();
    let mut state = trie.root();
    for depth in 0.. {
        let logits = s.logits();
        let log_norm = log_sum_exp(logits);
        for (o, option) in options.iter().enumerate() {
            if on_path[o] {
                scores[o] += (logits[option[depth] as usize] as f64 - log_norm) as f32;
            }
        }
        let token = match trie.forced(state) {
            Some(t) => t,
            None => {
                allowed.clear();
                allowed.extend(trie.allowed(state));
                sampler.sample_among(logits, &allowed)
            }
        };
        state = trie.advance(state, token).ok_or_else(|| {
            EngineError::Request(format!(
                "constraint walk chose token {token} outside the trie"
            ))
        })?;
        for (o, option) in options.iter().enumerate() {
            on_path[o] &= option[depth] == token;
        }
        out.push(token);
        if !on_token(token) {
            return Ok((FinishKind::Cancelled, scores, None));
        }
        if let Some(done) = trie.finished(state) {
            return Ok((FinishKind::Constraint, scores, Some(done)));
        }
        s.step(token)?;
    }
    Ok((FinishKind::Constraint, scores, None))
}

/// The request's constraint trie (checked against the vocabulary) and how many new tokens it
/// may produce within the context window.
pub(super) fn plan_request(
    c: &ModelConfig,
    req: &GenerateRequest,
) -> Result<(Option<TokenTrie>, usize), EngineError> {
    let trie = req.constraint.as_deref().map(TokenTrie::new).transpose()?;
    if let Some(t) = &trie
        && let Some(bad) = t
            .options()
            .iter()
            .flatten()
            .find(|t| **t as usize >= c.vocab_size)
    {
        return Err(EngineError::Request(format!(
            "constraint token id {bad} is outside the vocabulary"
        )));
    }
    let room = c.max_position_embeddings + 1 - req.prompt.len();
    let max_new = match &trie {
        Some(t) => {
            let longest = t.options().iter().map(Vec::len).max().unwrap_or(0);
            if longest > room {
                return Err(EngineError::Request(format!(
                    "a constraint option of {longest} tokens does not fit the context window after {} prompt tokens",
                    req.prompt.len()
                )));
            }
            longest
        }
        None => req.max_tokens.min(room),
    };
    Ok((trie, max_new))
}

fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    max as f64
        + logits
            .iter()
            .map(|v| ((v - max) as f64).exp())
            .sum::<f64>()
            .ln()
}

impl<D: Device> Runner for Core<D> {
    fn config(&self) -> &ModelConfig {
        self.model.config()
    }

    fn adapter_names(&self) -> Vec<String> {
        self.adapters.iter().map(|a| a.name.clone()).collect()
    }

    fn device_name(&self) -> String {
        self.dev.name()
    }

    fn generate(
        &mut self,
        req: &GenerateRequest,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        generate_with(self, req, on_token)
    }

    fn logits(
        &mut self,
        tokens: &[u32],
        adapter: Option<usize>,
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        self.check(tokens, adapter)?;
        let Core {
            dev,
            model,
            adapters,
            ws,
            ..
        } = self;
        let adapter = adapter.map(|a| &adapters[a]);
        let mut kv = dev.kv_alloc(model.kv_shape(), tokens.len())?;
        let mut out = Vec::with_capacity(tokens.len());
        for (i, chunk) in tokens.chunks(PREFILL_CHUNK).enumerate() {
            model.forward(dev, ws, &mut kv, i * PREFILL_CHUNK, chunk, adapter);
            model.logits_of_rows(dev, ws, chunk.len(), &mut out)?;
        }
        Ok(out)
    }

    fn prompt_logits(
        &mut self,
        tokens: &[u32],
        adapter: Option<usize>,
    ) -> Result<PromptLogits, EngineError> {
        prompt_logits_with(self, tokens, adapter)
    }

    fn cache_stats(&self) -> CacheStats {
        self.cache.stats(&self.dev)
    }

    fn clear_cache(&mut self) {
        self.cache.clear();
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            weights: self.model.weight_bytes(&self.dev),
            adapters: self.adapters.iter().map(|a| a.bytes(&self.dev)).sum(),
            kv_cache: self.cache.stats(&self.dev).bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_can_move_to_a_worker_thread() {
        fn is_send<T: Send>() {}
        is_send::<Engine>();
    }
}
