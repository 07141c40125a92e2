//! The engine's runner for a hybrid Qwen3.5-MoE model: prefill, decode and constrained choice
//! through the shared sampling loops, with a per-adapter prefix cache whose entries hold the
//! whole sequence state (KV of the full-attention layers, conv and recurrent state of the
//! linear ones). A recurrent state cannot be rewound, so an entry is reused only by a prompt
//! that extends all of its tokens; a prompt equal to them reuses the stored last logits.

use std::path::Path;

use super::config::ModelConfig;
use super::device::HybridDevice;
use super::error::EngineError;
use super::generate::{
    EngineOptions, GenerateOutput, GenerateRequest, MemoryReport, PromptLogits, Runner, Sequences,
    Stepper, adapter_dirs, check_request, generate_with, prompt_logits_with,
};
use super::hybrid::{HybridState, HybridWorkspace, Qwen35Moe};
use super::hybrid_lora::HybridLora;
use super::kv::{CacheLimits, CacheStats};
use super::model::PREFILL_CHUNK;
use super::weights::WeightFiles;

/// KV capacity grows in steps of this many positions.
const CAPACITY_STEP: usize = 256;

struct Entry<D: HybridDevice> {
    adapter: Option<usize>,
    state: HybridState<D>,
    /// Logits after the last token of `state` (so an identical prompt needs no recompute).
    last_logits: Vec<f32>,
    last_used: u64,
}

pub(super) struct HybridCore<D: HybridDevice> {
    dev: D,
    model: Qwen35Moe<D>,
    adapters: Vec<HybridLora<D>>,
    ws: HybridWorkspace<D>,
    cache: Vec<Entry<D>>,
    limits: CacheLimits,
    clock: u64,
    evictions: u64,
    logits: Vec<f32>,
}

/// A state taken from the cache (or fresh), with the logits after its last token when it came
/// from the cache (a prompt it holds whole needs no step to have them).
pub(super) struct Taken<D: HybridDevice> {
    state: HybridState<D>,
    cached_logits: Option<Vec<f32>>,
}

fn round_capacity(n: usize) -> usize {
    n.div_ceil(CAPACITY_STEP).max(1) * CAPACITY_STEP
}

impl<D: HybridDevice> HybridCore<D> {
    pub(super) fn load(
        dev: D,
        root: &Path,
        options: EngineOptions,
    ) -> Result<HybridCore<D>, EngineError> {
        let base = root.join("base");
        let config = ModelConfig::load(&base)?;
        let weights = WeightFiles::open_dir(&base)?;
        let model = Qwen35Moe::load(&dev, &config, &weights)?;
        drop(weights);
        let adapters = adapter_dirs(root)?
            .iter()
            .map(|(name, dir)| HybridLora::load(&dev, name, dir, &config))
            .collect::<Result<Vec<_>, _>>()?;
        let max_rank = adapters.iter().map(HybridLora::max_rank).max().unwrap_or(0);
        let ws = model.workspace(&dev, max_rank)?;
        Ok(HybridCore {
            dev,
            model,
            adapters,
            ws,
            cache: Vec::new(),
            limits: options.cache,
            clock: 0,
            evictions: 0,
            logits: Vec::new(),
        })
    }

    /// The longest cached state the prompt extends (taken out of the cache), or a fresh one,
    /// and the positions it already holds.
    fn checkout(
        &mut self,
        adapter: Option<usize>,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<(Taken<D>, usize), EngineError> {
        let best = self
            .cache
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                e.adapter == adapter
                    && e.state.tokens.len() <= prompt.len()
                    && prompt.starts_with(&e.state.tokens)
            })
            .max_by_key(|(_, e)| e.state.tokens.len())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let e = self.cache.swap_remove(i);
                let mut state = e.state;
                self.model
                    .reserve(&self.dev, &mut state, round_capacity(capacity))?;
                let reused = state.tokens.len();
                let cached_logits = Some(e.last_logits);
                Ok((
                    Taken {
                        state,
                        cached_logits,
                    },
                    reused,
                ))
            }
            None => {
                let state = self.model.new_state(&self.dev, round_capacity(capacity))?;
                let cached_logits = None;
                Ok((
                    Taken {
                        state,
                        cached_logits,
                    },
                    0,
                ))
            }
        }
    }

    fn checkin(&mut self, adapter: Option<usize>, state: HybridState<D>) {
        self.clock += 1;
        let bytes = self.model.state_bytes(&self.dev, &state);
        if bytes > self.limits.max_bytes || self.limits.max_entries == 0 {
            self.evictions += 1;
            return;
        }
        self.cache.push(Entry {
            adapter,
            state,
            last_logits: self.logits.clone(),
            last_used: self.clock,
        });
        loop {
            let total: usize = self
                .cache
                .iter()
                .map(|e| self.model.state_bytes(&self.dev, &e.state))
                .sum();
            if total <= self.limits.max_bytes && self.cache.len() <= self.limits.max_entries {
                break;
            }
            let Some((oldest, _)) = self
                .cache
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
            else {
                break;
            };
            self.cache.swap_remove(oldest);
            self.evictions += 1;
        }
    }

    /// Runs the prompt's tokens beyond `state` and leaves the last position's logits in
    /// `self.logits` (or the cached ones when nothing is left to run).
    fn prefill(
        &mut self,
        taken: &mut Taken<D>,
        prompt: &[u32],
        adapter: Option<usize>,
    ) -> Result<(), EngineError> {
        let state = &mut taken.state;
        let start = state.tokens.len();
        if start == prompt.len()
            && let Some(l) = taken.cached_logits.take()
        {
            self.logits = l;
            return Ok(());
        }
        let HybridCore {
            dev,
            model,
            adapters,
            ws,
            logits,
            ..
        } = self;
        let adapter = adapter.map(|a| &adapters[a]);
        let rest = &prompt[start..];
        let chunks = rest.len().div_ceil(PREFILL_CHUNK);
        for (i, chunk) in rest.chunks(PREFILL_CHUNK).enumerate() {
            model.forward(dev, ws, state, chunk, adapter)?;
            if i + 1 == chunks {
                model.logits_of_row(dev, ws, chunk.len() - 1, logits)?;
            }
        }
        Ok(())
    }
}

struct HybridStepper<'a, D: HybridDevice> {
    core: &'a mut HybridCore<D>,
    state: &'a mut HybridState<D>,
    adapter: Option<usize>,
}

impl<D: HybridDevice> Stepper for HybridStepper<'_, D> {
    fn logits(&self) -> &[f32] {
        &self.core.logits
    }

    fn step(&mut self, token: u32) -> Result<(), EngineError> {
        let HybridCore {
            dev,
            model,
            adapters,
            ws,
            logits,
            ..
        } = &mut *self.core;
        let position = self.state.tokens.len();
        model.reserve(dev, self.state, round_capacity(position + 1))?;
        let adapter = self.adapter.map(|a| &adapters[a]);
        model.forward(dev, ws, self.state, &[token], adapter)?;
        model.logits_of_row(dev, ws, 0, logits)
    }
}

impl<D: HybridDevice> Sequences for HybridCore<D> {
    type Seq = Taken<D>;

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
    ) -> Result<(Taken<D>, usize), EngineError> {
        self.checkout(adapter, prompt, capacity)
    }

    fn run_prompt(
        &mut self,
        seq: &mut Taken<D>,
        prompt: &[u32],
        adapter: Option<usize>,
    ) -> Result<(), EngineError> {
        self.prefill(seq, prompt, adapter)
    }

    fn stepper<'a>(
        &'a mut self,
        seq: &'a mut Taken<D>,
        adapter: Option<usize>,
    ) -> impl Stepper + 'a {
        HybridStepper {
            core: self,
            state: &mut seq.state,
            adapter,
        }
    }

    fn last_logits(&self) -> &[f32] {
        &self.logits
    }

    fn keep_sequence(&mut self, adapter: Option<usize>, seq: Taken<D>) {
        self.checkin(adapter, seq.state);
    }
}

impl<D: HybridDevice> Runner for HybridCore<D> {
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
        check_request(self.model.config(), self.adapters.len(), tokens, adapter)?;
        let HybridCore {
            dev,
            model,
            adapters,
            ws,
            ..
        } = self;
        let adapter = adapter.map(|a| &adapters[a]);
        let mut state = model.new_state(dev, tokens.len())?;
        let mut out = Vec::with_capacity(tokens.len());
        for chunk in tokens.chunks(PREFILL_CHUNK) {
            model.forward(dev, ws, &mut state, chunk, adapter)?;
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
        CacheStats {
            entries: self.cache.len(),
            bytes: self
                .cache
                .iter()
                .map(|e| self.model.state_bytes(&self.dev, &e.state))
                .sum(),
            tokens: self.cache.iter().map(|e| e.state.tokens.len()).sum(),
            evictions: self.evictions,
        }
    }

    fn clear_cache(&mut self) {
        self.cache.clear();
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            weights: self.model.weight_bytes(),
            adapters: self.adapters.iter().map(|a| a.bytes(&self.dev)).sum(),
            kv_cache: self.cache_stats().bytes,
        }
    }
}
