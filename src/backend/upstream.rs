//! A backend in front of another, as a server needs it upstream: at most N requests in flight
//! (a hosted engine that stalls past a few concurrent requests gets no more than it can take)
//! and the adapter spelled the way the engine wants it (`L2`, or SGLang's `base:L2`).

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use tokio::sync::Semaphore;

use super::{BackendError, ChatBackend, ChatRequest, ChatStream, ModelInfo, Slot};

/// How a request names its adapter on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AdapterNaming {
    /// The adapter name alone (`model: "L2"`): vLLM's `--lora-modules L2=…`.
    #[default]
    Adapter,
    /// `model: "BASE:L2"`: SGLang's syntax for a LoRA of the served base model.
    BaseColonAdapter { base: String },
}

/// The wrapped backend.
pub struct Upstream {
    inner: Arc<dyn ChatBackend>,
    permits: Option<Arc<Semaphore>>,
    naming: AdapterNaming,
}

impl Upstream {
    /// `max_in_flight`: `None` or 0 means no cap.
    pub fn new(
        inner: Arc<dyn ChatBackend>,
        max_in_flight: Option<usize>,
        naming: AdapterNaming,
    ) -> Self {
        Upstream {
            inner,
            permits: max_in_flight
                .filter(|n| *n > 0)
                .map(|n| Arc::new(Semaphore::new(n))),
            naming,
        }
    }
}

impl Upstream {
    /// Sends `req` holding `permit` (if any) for as long as the response stream lives: a
    /// request is in flight until its last byte.
    async fn send(
        &self,
        mut req: ChatRequest,
        permit: Option<Slot>,
    ) -> Result<ChatStream, BackendError> {
        if let AdapterNaming::BaseColonAdapter { base } = &self.naming {
            req.model = format!("{base}:{}", req.model);
        }
        let stream = self.inner.chat(req).await?;
        Ok(Box::pin(stream.map(move |item| {
            let _held = &permit;
            item
        })) as ChatStream)
    }
}

impl ChatBackend for Upstream {
    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
        Box::pin(async move {
            let hop = req.hop;
            let permit = match &self.permits {
                Some(p) => Some(Slot::holding(
                    p.clone()
                        .acquire_owned()
                        .await
                        .map_err(|_| BackendError::Cancelled { hop })?,
                )),
                None => None,
            };
            self.send(req, permit).await
        })
    }

    // Two free slots or none: the one taken here must leave one for the route hop sent next,
    // or at a cap of 1 the route would wait behind the speculative answer.
    fn spare_slot(&self) -> Option<Slot> {
        match &self.permits {
            None => Some(Slot::unlimited()),
            Some(p) if p.available_permits() >= 2 => {
                p.clone().try_acquire_owned().ok().map(Slot::holding)
            }
            Some(_) => None,
        }
    }

    fn chat_in_slot(
        &self,
        req: ChatRequest,
        slot: Slot,
    ) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
        Box::pin(self.send(req, Some(slot)))
    }

    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>> {
        self.inner.list_models()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn count_prompt_tokens(&self, req: &ChatRequest) -> Option<u64> {
        self.inner.count_prompt_tokens(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{ChatCompletion, ChatDelta, FinishReason};
    use crate::protocol::{ChatMessage, Hop};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[derive(Default)]
    struct Counting {
        now: AtomicUsize,
        peak: AtomicUsize,
        models: Mutex<Vec<String>>,
    }

    struct Slow(Arc<Counting>);

    impl ChatBackend for Slow {
        fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
            let c = self.0.clone();
            Box::pin(async move {
                c.models.lock().unwrap().push(req.model.clone());
                let n = c.now.fetch_add(1, Ordering::SeqCst) + 1;
                c.peak.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                c.now.fetch_sub(1, Ordering::SeqCst);
                let done = ChatCompletion {
                    message: ChatMessage::assistant("ok"),
                    finish_reason: FinishReason::Stop,
                    usage: None,
                    ttft: None,
                    latency: Duration::ZERO,
                    conversation_id: None,
                };
                Ok(
                    Box::pin(futures_util::stream::iter(vec![Ok(ChatDelta::Completed(
                        done,
                    ))])) as ChatStream,
                )
            })
        }
        fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>> {
            Box::pin(async { Ok(Vec::new()) })
        }
        fn describe(&self) -> String {
            "slow".into()
        }
    }

    #[tokio::test]
    async fn the_cap_holds_and_the_base_prefixes_the_adapter() {
        let c = Arc::new(Counting::default());
        let up = Arc::new(Upstream::new(
            Arc::new(Slow(c.clone())),
            Some(2),
            AdapterNaming::BaseColonAdapter {
                base: "qwen".into(),
            },
        ));
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let up = up.clone();
            tasks.push(tokio::spawn(async move {
                let req = ChatRequest::new("L2", vec![ChatMessage::user("x")], Hop::Answer);
                crate::backend::complete(up.as_ref(), req).await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(c.peak.load(Ordering::SeqCst) <= 2);
        assert!(c.models.lock().unwrap().iter().all(|m| m == "qwen:L2"));
    }

    #[tokio::test]
    async fn a_spare_slot_leaves_one_for_the_next_request_and_is_held_by_its_stream() {
        let c = Arc::new(Counting::default());
        let one = Upstream::new(Arc::new(Slow(c.clone())), Some(1), AdapterNaming::Adapter);
        assert!(one.spare_slot().is_none(), "at a cap of 1 nothing is spare");
        let two = Upstream::new(Arc::new(Slow(c.clone())), Some(2), AdapterNaming::Adapter);
        let slot = two.spare_slot().expect("two free: one to spare");
        assert!(
            two.spare_slot().is_none(),
            "the last free slot is not spare"
        );
        let req = ChatRequest::new("L2", vec![ChatMessage::user("x")], Hop::Answer);
        let stream = two.chat_in_slot(req, slot).await.unwrap();
        assert!(two.spare_slot().is_none(), "the stream holds its slot");
        drop(stream);
        assert!(
            two.spare_slot().is_some(),
            "a dropped stream frees its slot"
        );
        let open = Upstream::new(Arc::new(Slow(c)), None, AdapterNaming::Adapter);
        assert!(open.spare_slot().is_some() && open.spare_slot().is_some());
    }
}
