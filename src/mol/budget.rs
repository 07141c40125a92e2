//! The context budget: how many tokens an expert's view takes, against its context window.
//!
//! Counts are exact when the backend can tokenize (the local engine), and otherwise estimated
//! from characters with a ratio that each server-reported usage corrects.

use crate::protocol::{ChatMessage, ToolSpec};

/// Characters per token assumed before any usage was seen (English prose and code average).
const DEFAULT_CHARS_PER_TOKEN: f64 = 3.6;
/// Tokens of template overhead per message (role markers, separators).
const PER_MESSAGE_OVERHEAD: u64 = 4;
/// Bounds of a learned ratio: a pathological prompt (all whitespace, all CJK) must not wreck
/// later estimates.
const MIN_RATIO: f64 = 0.8;
const MAX_RATIO: f64 = 8.0;
/// The default compaction threshold, as a fraction of the window.
pub const DEFAULT_COMPACT_AT: f64 = 0.85;

/// Character count of what a request puts in the prompt.
pub fn prompt_chars(messages: &[ChatMessage], tools: &[ToolSpec]) -> u64 {
    let msg: usize = messages
        .iter()
        .map(|m| {
            m.content.len()
                + m.reasoning.as_deref().map_or(0, str::len)
                + m.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len() + c.id.len() + 16)
                    .sum::<usize>()
        })
        .sum();
    let tools: usize = tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum();
    (msg + tools) as u64
}

/// Estimates prompt tokens, and learns the chars-per-token ratio from real counts.
#[derive(Debug, Clone)]
pub struct TokenEstimator {
    chars_per_token: f64,
}

impl Default for TokenEstimator {
    fn default() -> Self {
        TokenEstimator {
            chars_per_token: DEFAULT_CHARS_PER_TOKEN,
        }
    }
}

impl TokenEstimator {
    /// An estimator that starts from a ratio learned earlier (a resumed session).
    pub fn with_ratio(chars_per_token: f64) -> Self {
        TokenEstimator {
            chars_per_token: if chars_per_token.is_finite() {
                chars_per_token.clamp(MIN_RATIO, MAX_RATIO)
            } else {
                DEFAULT_CHARS_PER_TOKEN
            },
        }
    }

    pub fn estimate(&self, messages: &[ChatMessage], tools: &[ToolSpec]) -> u64 {
        let chars = prompt_chars(messages, tools) as f64;
        (chars / self.chars_per_token).ceil() as u64 + PER_MESSAGE_OVERHEAD * messages.len() as u64
    }

    /// Corrects the ratio with a real count for a prompt of `chars` characters and `messages`
    /// messages (the server's `usage.prompt_tokens`, or the local tokenizer's count).
    pub fn observe(&mut self, chars: u64, messages: usize, actual_tokens: u64) {
        let overhead = PER_MESSAGE_OVERHEAD * messages as u64;
        if actual_tokens <= overhead || chars == 0 {
            return;
        }
        let ratio = chars as f64 / (actual_tokens - overhead) as f64;
        self.chars_per_token = ratio.clamp(MIN_RATIO, MAX_RATIO);
    }

    pub fn chars_per_token(&self) -> f64 {
        self.chars_per_token
    }
}

/// Thresholds of an expert's context window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContextBudget {
    /// The expert's context window in tokens.
    pub window: u64,
    /// Compact when the view would pass this fraction of the window (default 0.85).
    pub compact_at: f64,
    /// Shrink old tool outputs when the view passes this fraction (default 0.5).
    pub shrink_at: f64,
    /// Tokens kept free for the answer.
    pub reserve: u64,
}

impl ContextBudget {
    pub fn new(window: u64) -> Self {
        ContextBudget {
            window,
            compact_at: DEFAULT_COMPACT_AT,
            shrink_at: 0.5,
            reserve: (window / 8).min(8192),
        }
    }

    /// The same budget compacting at `fraction` of the window (kept within 0.2..=0.98, and
    /// never below the shrink threshold).
    pub fn with_compact_at(mut self, fraction: f64) -> Self {
        if fraction.is_finite() {
            self.compact_at = fraction.clamp(0.2, 0.98);
            self.shrink_at = self.shrink_at.min(self.compact_at);
        }
        self
    }

    fn limit(&self, fraction: f64) -> u64 {
        ((self.window as f64 * fraction) as u64).saturating_sub(self.reserve)
    }

    pub fn needs_compaction(&self, tokens: u64) -> bool {
        tokens > self.limit(self.compact_at)
    }

    pub fn needs_shrink(&self, tokens: u64) -> bool {
        tokens > self.limit(self.shrink_at)
    }

    /// The largest prompt that can be sent at all (window minus the answer reserve).
    pub fn hard_limit(&self) -> u64 {
        self.window.saturating_sub(self.reserve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimator_learns_from_usage() {
        let mut est = TokenEstimator::default();
        let msgs = vec![ChatMessage::user("x".repeat(400))];
        let first = est.estimate(&msgs, &[]);
        assert_eq!(first, 112 + 4);
        est.observe(400, 1, 204); // 2 chars per token really
        assert_eq!(est.estimate(&msgs, &[]), 204);
        est.observe(400, 1, 1); // nonsense counts are ignored
        assert_eq!(est.estimate(&msgs, &[]), 204);
    }

    #[test]
    fn budget_thresholds() {
        let b = ContextBudget::new(4096);
        assert_eq!(b.reserve, 512);
        assert!(!b.needs_compaction(2900));
        assert!(b.needs_compaction(3000));
        assert!(b.needs_shrink(1600));
        assert!(!b.needs_shrink(1500));
        let low = ContextBudget::new(4096).with_compact_at(0.4);
        assert!(low.needs_compaction(1200));
        assert_eq!(low.shrink_at, 0.4);
        assert_eq!(ContextBudget::new(4096).with_compact_at(f64::NAN), b);
    }

    #[test]
    fn a_learned_ratio_is_restored_within_bounds() {
        let msgs = vec![ChatMessage::user("x".repeat(300))];
        assert_eq!(TokenEstimator::with_ratio(3.0).estimate(&msgs, &[]), 104);
        assert_eq!(TokenEstimator::with_ratio(100.0).chars_per_token(), 8.0);
        assert_eq!(
            TokenEstimator::with_ratio(f64::NAN).chars_per_token(),
            TokenEstimator::default().chars_per_token()
        );
    }
}
