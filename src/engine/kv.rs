//! KV storage per sequence and the per-adapter prefix cache: each finished request leaves its
//! K/V behind, keyed by (adapter, tokens); the next request on the same adapter resumes from the
//! longest matching token prefix and prefills only the rest. Memory is bounded (bytes and
//! entries), least recently used entries go first.

use super::device::{Device, KvShape};
use super::error::EngineError;

/// Capacity grows in steps of this many positions, so short extensions reuse the allocation.
const CAPACITY_STEP: usize = 256;

/// One sequence's KV and the tokens whose K/V it holds (`tokens.len()` positions are valid).
pub struct KvEntry<D: Device> {
    pub adapter: Option<usize>,
    pub tokens: Vec<u32>,
    pub kv: D::Kv,
    last_used: u64,
}

/// Limits of the prefix cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Bytes of KV kept across requests (the running request may exceed it; it is then not kept).
    pub max_bytes: usize,
    /// Sequences kept across requests.
    pub max_entries: usize,
}

impl Default for CacheLimits {
    fn default() -> Self {
        CacheLimits {
            max_bytes: 2 << 30,
            max_entries: 8,
        }
    }
}

/// What the cache holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: usize,
    pub tokens: usize,
    pub evictions: u64,
}

/// The prefix cache of one engine.
pub struct PrefixCache<D: Device> {
    entries: Vec<KvEntry<D>>,
    limits: CacheLimits,
    clock: u64,
    evictions: u64,
}

/// A checked-out entry and how many of the prompt's positions it already holds.
pub struct Checkout<D: Device> {
    pub entry: KvEntry<D>,
    pub reused: usize,
}

impl<D: Device> PrefixCache<D> {
    pub fn new(limits: CacheLimits) -> PrefixCache<D> {
        PrefixCache {
            entries: Vec::new(),
            limits,
            clock: 0,
            evictions: 0,
        }
    }

    pub fn stats(&self, dev: &D) -> CacheStats {
        CacheStats {
            entries: self.entries.len(),
            bytes: self.entries.iter().map(|e| dev.kv_bytes(&e.kv)).sum(),
            tokens: self.entries.iter().map(|e| e.tokens.len()).sum(),
            evictions: self.evictions,
        }
    }

    /// Drops every cached sequence.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Takes the KV to run `prompt` on with `adapter`, with room for `capacity` positions.
    /// At least the prompt's last token is left to prefill, so its logits get computed.
    pub fn checkout(
        &mut self,
        dev: &D,
        shape: KvShape,
        adapter: Option<usize>,
        prompt: &[u32],
        capacity: usize,
    ) -> Result<Checkout<D>, EngineError> {
        let usable = prompt.len().saturating_sub(1);
        let best = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.adapter == adapter)
            .map(|(i, e)| (i, common_prefix(&e.tokens, &prompt[..usable])))
            .filter(|(_, n)| *n > 0)
            .max_by_key(|(i, n)| (*n, self.entries[*i].last_used));
        let capacity = round_capacity(capacity);
        match best {
            Some((i, reused)) => {
                // Resume the cached sequence. Where the prompt branches off inside it, its tail
                // is dropped rather than copied: in an agent loop the tail is a superseded
                // ending (an answer re-rendered by the template, a one-off hop), and a copy
                // would double the memory of the longest conversation.
                let mut entry = self.entries.swap_remove(i);
                entry.tokens.truncate(reused);
                let missing = capacity.saturating_sub(dev.kv_capacity(&entry.kv));
                self.make_room(dev, missing * dev.kv_bytes_per_token(shape))?;
                if missing > 0 {
                    dev.kv_grow(&mut entry.kv, capacity)?;
                }
                Ok(Checkout { entry, reused })
            }
            None => {
                self.make_room(dev, capacity * dev.kv_bytes_per_token(shape))?;
                Ok(Checkout {
                    entry: KvEntry {
                        adapter,
                        tokens: Vec::new(),
                        kv: dev.kv_alloc(shape, capacity)?,
                        last_used: 0,
                    },
                    reused: 0,
                })
            }
        }
    }

    /// Returns a used entry (its `tokens` = the positions whose K/V it holds) to the cache,
    /// replacing any entry it makes redundant, then evicts down to the limits.
    pub fn checkin(&mut self, dev: &D, mut entry: KvEntry<D>) {
        self.clock += 1;
        entry.last_used = self.clock;
        // An older entry that is a prefix of this one (same adapter) adds nothing.
        self.entries.retain(|e| {
            !(e.adapter == entry.adapter
                && e.tokens.len() <= entry.tokens.len()
                && entry.tokens.starts_with(&e.tokens))
        });
        if entry.tokens.is_empty() || dev.kv_bytes(&entry.kv) > self.limits.max_bytes {
            return;
        }
        self.entries.push(entry);
        self.evict_to(dev, self.limits.max_bytes, self.limits.max_entries);
    }

    /// Evicts least recently used entries so `extra` more bytes fit under the limit.
    fn make_room(&mut self, dev: &D, extra: usize) -> Result<(), EngineError> {
        let budget = self.limits.max_bytes.saturating_sub(extra);
        self.evict_to(dev, budget, self.limits.max_entries);
        Ok(())
    }

    fn evict_to(&mut self, dev: &D, max_bytes: usize, max_entries: usize) {
        loop {
            let bytes: usize = self.entries.iter().map(|e| dev.kv_bytes(&e.kv)).sum();
            if (bytes <= max_bytes && self.entries.len() <= max_entries) || self.entries.is_empty()
            {
                return;
            }
            let oldest = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
                .unwrap_or(0);
            self.entries.swap_remove(oldest);
            self.evictions += 1;
        }
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn round_capacity(n: usize) -> usize {
    n.max(1).div_ceil(CAPACITY_STEP) * CAPACITY_STEP
}
