//! The speculative answer: while L0 routes a new user turn, the expert the route will probably
//! pick already answers. `speculate = sticky` bets on the expert of the conversation's
//! previous turn; `always` also bets on the route's fallback expert (the open task's, else the
//! profile's default) when there is no previous turn.
//!
//! A hit — the route picks that expert and the answer request the turn builds afterwards is
//! the one already sent — keeps the answer under way. A miss drops the request (the HTTP
//! stream is closed, so the engine stops generating) and the turn sends the chosen expert's.
//! Comparing the whole request, not just the expert, is what makes a hit safe: a view that
//! changed meanwhile (a summary recorded, a compaction) is a miss, never a stale answer.
//!
//! Nothing of a speculative answer reaches the user before the route confirms it: its stream
//! is read into a bounded buffer while the route runs (a full buffer stops reading, and the
//! engine's stream waits), and on a hit the buffer is handed over first, then the stream
//! continues live.
//!
//! A speculative request takes a request slot of its own, and only one the backend has to
//! spare ([`ChatBackend::spare_slot`]): it never waits for one, and never takes the last one
//! the route hop needs. With none to spare the turn runs unspeculated.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::backend::{BackendError, ChatBackend, ChatDelta, ChatRequest, ChatStream};
use crate::mol::budget::TokenEstimator;
use crate::mol::route::fallback_expert;
use crate::mol::timeline::Timeline;
use crate::protocol::{Expert, Speculate, SpeculationOutcome, SpeculationSample, TokenUsage};

/// Stream items held while the route runs; beyond, the speculative stream is not read on.
const HELD_ITEMS: usize = 1024;

/// The expert a new user turn speculates on, from the timeline as the turn finds it (before
/// its task opens); `None` when the mode does not speculate here.
pub fn speculative_expert(
    mode: Speculate,
    timeline: &Timeline,
    open_owner: Option<Expert>,
) -> Option<Expert> {
    let previous = timeline.tasks.last().map(|t| t.owner);
    match mode {
        Speculate::Off => None,
        Speculate::Sticky => previous,
        Speculate::Always => Some(previous.unwrap_or_else(|| fallback_expert(open_owner))),
    }
}

/// Whether `expert` may answer now from `timeline` (before the turn's task opens): a summary
/// of another expert's task that its view must show and that is still being made means the
/// turn will wait for it and send a different view — speculating would only waste a request.
pub fn view_is_ready(timeline: &Timeline, expert: Expert) -> bool {
    timeline.summaries_needed_by(expert).is_empty()
}

/// What a speculative stream has produced so far, for the cost of a miss.
#[derive(Default)]
struct Progress {
    /// Streamed text, reasoning and tool-argument chunks (about one token each).
    chunks: AtomicU64,
    /// The usage the server reported, when the answer finished.
    usage: Mutex<Option<TokenUsage>>,
}

/// Aborts the task reading the speculative stream when dropped: the stream is dropped with it,
/// which closes the upstream request.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A speculative answer hop under way. Dropping it cancels the request.
pub struct Speculation {
    expert: Expert,
    request: ChatRequest,
    started: Instant,
    prompt_estimate: u64,
    progress: Arc<Progress>,
    held: mpsc::Receiver<Result<ChatDelta, BackendError>>,
    reader: AbortOnDrop,
}

/// How the route's decision met a speculation.
pub enum Resolved {
    /// The answer under way is the turn's: its stream (held items first) and when it was sent.
    Hit {
        stream: ChatStream,
        started: Instant,
    },
    /// Cancelled; what it cost.
    Miss(SpeculationSample),
}

impl Speculation {
    /// Sends `request`, `expert`'s answer request, on a slot `backend` has to spare; `None`
    /// when it has none (the sample to count says so).
    pub fn start(
        backend: &Arc<dyn ChatBackend>,
        expert: Expert,
        request: ChatRequest,
    ) -> Result<Speculation, SpeculationSample> {
        let Some(slot) = backend.spare_slot() else {
            return Err(SpeculationSample {
                outcome: SpeculationOutcome::NoSlot,
                wasted_prompt_tokens: 0,
                wasted_completion_tokens: 0,
            });
        };
        let prompt_estimate = backend.count_prompt_tokens(&request).unwrap_or_else(|| {
            TokenEstimator::default().estimate(&request.messages, &request.tools)
        });
        let progress = Arc::new(Progress::default());
        let (tx, held) = mpsc::channel(HELD_ITEMS);
        let reader = {
            let backend = backend.clone();
            let request = request.clone();
            let progress = progress.clone();
            tokio::spawn(async move {
                let mut stream = match backend.chat_in_slot(request, slot).await {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                while let Some(item) = stream.next().await {
                    match &item {
                        Ok(
                            ChatDelta::Text(_)
                            | ChatDelta::Reasoning(_)
                            | ChatDelta::ToolCallArguments { .. },
                        ) => {
                            progress.chunks.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(ChatDelta::Completed(done)) => {
                            *progress.usage.lock().unwrap_or_else(|p| p.into_inner()) = done.usage;
                        }
                        _ => {}
                    }
                    let last = matches!(item, Ok(ChatDelta::Completed(_)) | Err(_));
                    if tx.send(item).await.is_err() || last {
                        return;
                    }
                }
            })
            .abort_handle()
        };
        Ok(Speculation {
            expert,
            request,
            started: Instant::now(),
            prompt_estimate,
            progress,
            held,
            reader: AbortOnDrop(reader),
        })
    }

    /// The expert speculated on.
    pub fn expert(&self) -> Expert {
        self.expert
    }

    /// A hit when the route chose this expert and `request` — what the turn sends now — is
    /// the request already sent; else the speculation is cancelled.
    pub fn resolve(self, expert: Expert, request: &ChatRequest) -> Resolved {
        if expert != self.expert || *request != self.request {
            return Resolved::Miss(self.cancel());
        }
        let Speculation {
            started,
            held,
            reader,
            ..
        } = self;
        let stream = futures_util::stream::unfold((held, reader), |(mut held, reader)| async {
            held.recv().await.map(|item| (item, (held, reader)))
        });
        Resolved::Hit {
            stream: Box::pin(stream),
            started,
        }
    }

    /// Cancels the request and says what it cost: the server's usage when it had finished,
    /// else the prompt estimated and a token per streamed chunk.
    pub fn cancel(self) -> SpeculationSample {
        self.reader.0.abort();
        let usage = *self
            .progress
            .usage
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (prompt, completion) = match usage.filter(|u| !u.estimated) {
            Some(u) => (u.prompt_tokens, u.completion_tokens),
            None => (
                self.prompt_estimate,
                self.progress.chunks.load(Ordering::Relaxed),
            ),
        };
        SpeculationSample {
            outcome: SpeculationOutcome::Miss,
            wasted_prompt_tokens: prompt,
            wasted_completion_tokens: completion,
        }
    }
}

/// The sample of a hit.
pub fn hit_sample() -> SpeculationSample {
    SpeculationSample {
        outcome: SpeculationOutcome::Hit,
        wasted_prompt_tokens: 0,
        wasted_completion_tokens: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{ChatCompletion, FinishReason, ModelInfo, Slot};
    use crate::protocol::{ChatMessage, Hop};
    use futures_util::future::BoxFuture;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    /// Streams "a", "b", "c" slowly; records whether its stream was dropped before the end.
    struct Slow {
        dropped_early: Arc<AtomicBool>,
        spare: bool,
    }

    struct Flag(Arc<AtomicBool>, bool);
    impl Drop for Flag {
        fn drop(&mut self) {
            if !self.1 {
                self.0.store(true, Ordering::SeqCst);
            }
        }
    }

    impl ChatBackend for Slow {
        fn chat(&self, _req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
            let flag = Flag(self.dropped_early.clone(), false);
            Box::pin(async move {
                let stream = futures_util::stream::unfold((0, flag), |(i, mut flag)| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let item = match i {
                        0..=2 => ChatDelta::Text(["a", "b", "c"][i].into()),
                        3 => {
                            flag.1 = true;
                            ChatDelta::Completed(ChatCompletion {
                                message: ChatMessage::assistant("abc"),
                                finish_reason: FinishReason::Stop,
                                usage: Some(TokenUsage {
                                    prompt_tokens: 40,
                                    completion_tokens: 3,
                                    cached_tokens: None,
                                    estimated: false,
                                }),
                                ttft: None,
                                latency: Duration::ZERO,
                                conversation_id: None,
                            })
                        }
                        _ => return None,
                    };
                    Some((Ok(item), (i + 1, flag)))
                });
                Ok(Box::pin(stream) as ChatStream)
            })
        }
        fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>> {
            Box::pin(async { Ok(Vec::new()) })
        }
        fn describe(&self) -> String {
            "slow".into()
        }
        fn spare_slot(&self) -> Option<Slot> {
            self.spare.then(Slot::unlimited)
        }
    }

    fn backend(spare: bool) -> (Arc<dyn ChatBackend>, Arc<AtomicBool>) {
        let dropped_early = Arc::new(AtomicBool::new(false));
        let b = Slow {
            dropped_early: dropped_early.clone(),
            spare,
        };
        (Arc::new(b), dropped_early)
    }

    fn request(model: &str) -> ChatRequest {
        ChatRequest::new(model, vec![ChatMessage::user("fix it")], Hop::Answer)
    }

    #[test]
    fn the_modes_pick_the_previous_expert_or_the_fallback() {
        let mut t = Timeline::default();
        assert_eq!(speculative_expert(Speculate::Sticky, &t, None), None);
        assert_eq!(
            speculative_expert(Speculate::Always, &t, None),
            Some(Expert::L2)
        );
        t.open(Expert::L1, "book");
        t.close(true);
        for mode in [Speculate::Sticky, Speculate::Always] {
            assert_eq!(speculative_expert(mode, &t, None), Some(Expert::L1));
        }
        assert_eq!(speculative_expert(Speculate::Off, &t, None), None);
        // L1's summary is pending: L1's own view does not need it, L3's does.
        assert!(view_is_ready(&t, Expert::L1));
        assert!(!view_is_ready(&t, Expert::L3));
        t.record_summary(1, "booked");
        assert!(view_is_ready(&t, Expert::L3));
    }

    #[tokio::test]
    async fn a_hit_hands_over_the_held_stream_whole() {
        let (b, dropped_early) = backend(true);
        let s = Speculation::start(&b, Expert::L2, request("L2"))
            .ok()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Resolved::Hit { stream, .. } = s.resolve(Expert::L2, &request("L2")) else {
            panic!("same expert, same request: a hit");
        };
        let items: Vec<_> = stream.collect().await;
        let texts: Vec<String> = items
            .iter()
            .filter_map(|i| match i {
                Ok(ChatDelta::Text(t)) => Some(t.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["a", "b", "c"]);
        assert!(matches!(items.last(), Some(Ok(ChatDelta::Completed(_)))));
        assert!(!dropped_early.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_miss_drops_the_request_and_counts_what_it_cost() {
        let (b, dropped_early) = backend(true);
        let s = Speculation::start(&b, Expert::L2, request("L2"))
            .ok()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Resolved::Miss(sample) = s.resolve(Expert::L1, &request("L1")) else {
            panic!("another expert: a miss");
        };
        assert_eq!(sample.outcome, SpeculationOutcome::Miss);
        assert!(sample.wasted_prompt_tokens > 0);
        assert!(sample.wasted_completion_tokens >= 1, "{sample:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            dropped_early.load(Ordering::SeqCst),
            "the stream was dropped"
        );

        // The same expert with a different request (the view changed) is a miss too.
        let (b, _) = backend(true);
        let s = Speculation::start(&b, Expert::L2, request("L2"))
            .ok()
            .unwrap();
        let mut other = request("L2");
        other.messages.push(ChatMessage::assistant("a summary"));
        assert!(matches!(s.resolve(Expert::L2, &other), Resolved::Miss(_)));

        // Finished before the route: the server's own usage is the cost.
        let (b, _) = backend(true);
        let s = Speculation::start(&b, Expert::L2, request("L2"))
            .ok()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sample = s.cancel();
        assert_eq!(
            (sample.wasted_prompt_tokens, sample.wasted_completion_tokens),
            (40, 3)
        );
    }

    #[tokio::test]
    async fn no_spare_slot_no_speculation() {
        let (b, _) = backend(false);
        let err = Speculation::start(&b, Expert::L2, request("L2"))
            .err()
            .unwrap();
        assert_eq!(err.outcome, SpeculationOutcome::NoSlot);
    }
}
