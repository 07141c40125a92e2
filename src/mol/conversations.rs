//! The MoL loop as a server runs it: conversations held in memory (LRU + idle TTL), each a
//! timeline of tasks, and one turn per client request — route (or stay on the expert whose
//! tool calls are being answered) → answer from that expert's own view → summary in the
//! background, recorded before the conversation's next turn needs it.
//!
//! A client resends the whole history (Chat Completions); the conversation's own timeline is
//! what the experts see. Only the new tail of a request — a user message, or the results of
//! the pending tool calls — enters the timeline. A request whose earlier history is not the
//! one this conversation holds (edited, truncated, another client) starts the conversation
//! over from that history instead of mixing the two. A client that sends no conversation id
//! is found by a digest of its history, so stock SDKs keep their summaries too.
//!
//! A turn works on a copy of the conversation and commits it only when the frontend says the
//! answer was delivered: a failed turn, or a client that went away, leaves no trace.
//!
//! With a state folder ([`Conversations::persist_to`], `baton serve --state-dir`) every
//! committed turn is written there too (the conversation, and the stored response it made),
//! again once its summary is in, and deleted when the store drops it; a restart loads it all
//! back. [`crate::mol::persist`] owns the files.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::{BoxFuture, FutureExt, Shared};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::{OwnedMutexGuard, mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::backend::{BackendError, ChatBackend, ChatDelta, ChatRequest, ChatStream, FinishReason};
use crate::mol::answer::{AnswerInput, AnswerOptions, answer_hop_request};
use crate::mol::decide::{Step, decide};
use crate::mol::persist::{self, EntryKind, StateDir, StateDirError};
use crate::mol::profile::Profile;
use crate::mol::speculate::{self, Resolved, Speculation};
use crate::mol::timeline::{SummaryState, Task, Timeline, with_identity};
use crate::protocol::{
    ChatMessage, ErrorKind, Expert, Hop, HopSample, Mode, MolService, Role, ServiceFuture,
    ServiceObserver, Speculate, StateEvent, TokenUsage, TurnDone, TurnError, TurnErrorKind,
    TurnEvent, TurnFinish, TurnHandle, TurnInput, TurnRouted,
};

/// Limits of the conversation store.
#[derive(Debug, Clone)]
pub struct StoreLimits {
    /// Conversations held at most; the least recently used goes first.
    pub max_conversations: usize,
    /// A conversation idle this long is forgotten.
    pub idle_ttl: Duration,
    /// Approximate bytes of text all conversations may hold; beyond, the least recently used
    /// go first (a client cannot fill memory by opening conversations with huge histories).
    pub max_bytes: usize,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_conversations: 5000,
            idle_ttl: Duration::from_secs(1800),
            max_bytes: 1 << 30,
        }
    }
}

/// Tool calls of the open task that wait for their results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PendingTools {
    expert: Expert,
    ids: Vec<String>,
}

/// What a turn changes, copied at its start and written back on delivery; what the state
/// folder keeps of a conversation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct Core {
    timeline: Timeline,
    /// History a client brought that this server never saw (a conversation that started
    /// elsewhere, or before a restart): shown to every expert after the system head.
    context: Vec<ChatMessage>,
    pending_tools: Option<PendingTools>,
    /// Digest of the client-side history (after the system head) as this conversation ends
    /// now, answer included: the next request's earlier history must match it.
    digest: Option<String>,
}

/// A summary hop in flight; shared, so a forked conversation waits for the same hop.
impl Core {
    /// The bytes of text this state holds, near enough for a memory budget.
    fn approx_bytes(&self) -> usize {
        let message = |m: &ChatMessage| {
            m.content.len()
                + m.reasoning.as_ref().map_or(0, String::len)
                + m.tool_calls
                    .iter()
                    .map(|c| c.arguments.len() + c.name.len() + c.id.len())
                    .sum::<usize>()
                + 64
        };
        let tasks: usize = self
            .timeline
            .tasks
            .iter()
            .map(|t| t.user_text.len() + t.messages.iter().map(message).sum::<usize>())
            .sum();
        tasks + self.context.iter().map(message).sum::<usize>()
    }
}

#[derive(Clone)]
struct PendingSummary {
    task_id: u64,
    text: Shared<BoxFuture<'static, String>>,
}

#[derive(Default, Clone)]
struct State {
    core: Core,
    summaries: Vec<PendingSummary>,
}

impl State {
    /// Records every summary that has finished, without waiting.
    fn collect_finished(&mut self) {
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.summaries)
            .into_iter()
            .partition(|s| s.text.peek().is_some());
        self.summaries = running;
        for s in done {
            if let Some(text) = s.text.peek() {
                self.core.timeline.record_summary(s.task_id, text.clone());
            }
        }
    }

    /// Waits for the summaries of `tasks` still in flight and records them.
    async fn await_summaries(&mut self, tasks: &[u64]) {
        let (wanted, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.summaries)
            .into_iter()
            .partition(|s| tasks.contains(&s.task_id));
        self.summaries = rest;
        for s in wanted {
            let text = s.text.await;
            self.core.timeline.record_summary(s.task_id, text);
        }
    }
}

struct Conversation {
    id: String,
    client: String,
    /// A stored response: forked from, never continued in place or found from history.
    snapshot: bool,
    /// Approximate size of its state, as of its last committed turn.
    bytes: std::sync::atomic::AtomicUsize,
    state: Arc<tokio::sync::Mutex<State>>,
    last_used: Mutex<Instant>,
}

#[derive(Default)]
struct Store {
    by_id: HashMap<String, Arc<Conversation>>,
    /// `client \0 digest` → the ids of the conversations at that history, oldest first: finds
    /// a conversation from its history alone. Two clients whose first turns were identical
    /// hold two conversations at one history, and each continues one of them.
    by_history: HashMap<String, Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn history_key(client: &str, digest: &str) -> String {
    format!("{client}\0{digest}")
}

impl Store {
    /// Forgets conversations idle past the TTL, then the least recently used beyond the cap;
    /// returns their ids. A conversation whose turn is running is never dropped under it.
    fn evict(&mut self, limits: &StoreLimits, now: Instant) -> Vec<String> {
        let idle: Vec<String> = self
            .by_id
            .values()
            .filter(|c| now.duration_since(*lock(&c.last_used)) > limits.idle_ttl)
            .filter(|c| c.state.try_lock().is_ok())
            .map(|c| c.id.clone())
            .collect();
        for id in &idle {
            self.remove(id);
        }
        let mut gone = idle;
        let mut bytes: usize = self
            .by_id
            .values()
            .map(|c| c.bytes.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        while self.by_id.len() > limits.max_conversations || bytes > limits.max_bytes {
            let oldest = self
                .by_id
                .values()
                .filter(|c| c.state.try_lock().is_ok())
                .min_by_key(|c| *lock(&c.last_used))
                .map(|c| c.id.clone());
            match oldest {
                Some(id) => {
                    if let Some(c) = self.by_id.get(&id) {
                        bytes = bytes
                            .saturating_sub(c.bytes.load(std::sync::atomic::Ordering::Relaxed));
                    }
                    self.remove(&id);
                    gone.push(id);
                }
                None => break,
            }
        }
        gone
    }

    fn remove(&mut self, id: &str) {
        if self.by_id.remove(id).is_some() {
            self.by_history.retain(|_, ids| {
                ids.retain(|v| v != id);
                !ids.is_empty()
            });
        }
    }

    /// Records that conversation `id` is at history `key`.
    fn point(&mut self, key: String, id: &str) {
        let ids = self.by_history.entry(key).or_default();
        if !ids.iter().any(|v| v == id) {
            ids.push(id.to_string());
        }
    }

    /// Takes back that conversation `id` is at history `key`.
    fn unpoint(&mut self, key: &str, id: &str) {
        if let Some(ids) = self.by_history.get_mut(key) {
            ids.retain(|v| v != id);
            if ids.is_empty() {
                self.by_history.remove(key);
            }
        }
    }

    /// A conversation at history `key`: one whose turn is not running if there is one (a turn
    /// in flight moves it past this history), else the oldest.
    fn at_history(&self, key: &str) -> Option<Arc<Conversation>> {
        let held: Vec<&Arc<Conversation>> = self
            .by_history
            .get(key)?
            .iter()
            .filter_map(|id| self.by_id.get(id))
            .collect();
        held.iter()
            .find(|c| c.state.try_lock().is_ok())
            .or(held.first())
            .map(|c| (*c).clone())
    }
}

/// The MoL loop over one backend, serving many conversations.
pub struct Conversations {
    backend: Arc<dyn ChatBackend>,
    profile: Arc<Profile>,
    served_model: String,
    limits: StoreLimits,
    store: Mutex<Store>,
    observer: Arc<dyn ServiceObserver>,
    /// Running turns and summary hops, for a drain to wait on.
    summaries: TaskTracker,
    /// Where committed conversations are kept across restarts (`--state-dir`).
    disk: Option<Arc<StateDir>>,
    speculate: Speculate,
    /// Whether short follow-ups stay with the previous expert (`mol::follow_up`).
    follow_ups: crate::protocol::FollowUps,
}

/// A new conversation id: matches the `X-Conversation-Id` syntax clients echo.
fn new_conversation_id() -> String {
    format!("conv_{}", uuid::Uuid::now_v7().simple())
}

/// The digest of a client history: roles, trimmed texts, tool call ids and names, tool result
/// ids. Reasoning is left out (clients drop it), and so are the exact argument bytes.
fn digest(messages: &[ChatMessage]) -> String {
    let mut h = Sha256::new();
    for m in messages {
        let role = match m.role {
            Role::System => "s",
            Role::User => "u",
            Role::Assistant => "a",
            Role::Tool => "t",
        };
        h.update(role.as_bytes());
        h.update([0]);
        h.update(m.content.trim().as_bytes());
        h.update([0]);
        for c in &m.tool_calls {
            h.update(c.id.as_bytes());
            h.update([1]);
            h.update(c.name.as_bytes());
            h.update([1]);
        }
        if let Some(id) = &m.tool_call_id {
            h.update(id.as_bytes());
        }
        h.update([2]);
    }
    let out = h.finalize();
    out.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// A request's messages, split: the leading system messages, the earlier history, and the new
/// tail (the last user message, or the trailing tool results).
struct Split {
    head: Vec<ChatMessage>,
    earlier: Vec<ChatMessage>,
    tail: Tail,
    /// Everything after the head, tail included (for the digest after the answer).
    after_head: Vec<ChatMessage>,
}

enum Tail {
    User(String),
    ToolResults(Vec<ChatMessage>),
}

fn split(messages: &[ChatMessage]) -> Result<Split, TurnError> {
    let head_len = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let (head, rest) = messages.split_at(head_len);
    let Some(last) = rest.last() else {
        return Err(TurnError::bad_request(
            "invalid_messages",
            "messages must hold a user message or tool results after the system messages",
        ));
    };
    let (tail, tail_len) = match last.role {
        Role::User => (Tail::User(last.content.clone()), 1),
        Role::Tool => {
            let n = rest
                .iter()
                .rev()
                .take_while(|m| m.role == Role::Tool)
                .count();
            (Tail::ToolResults(rest[rest.len() - n..].to_vec()), n)
        }
        Role::Assistant | Role::System => {
            return Err(TurnError::bad_request(
                "invalid_messages",
                "the last message must be a user message or tool results",
            ));
        }
    };
    Ok(Split {
        head: head.to_vec(),
        earlier: rest[..rest.len() - tail_len].to_vec(),
        tail,
        after_head: rest.to_vec(),
    })
}

fn upstream_error(e: &BackendError) -> TurnError {
    let kind = e.kind();
    let (kind, code) = match kind {
        ErrorKind::ContextOverflow => (TurnErrorKind::ContextOverflow, "context_length_exceeded"),
        ErrorKind::Cancelled => (TurnErrorKind::Upstream(kind), "cancelled"),
        _ => (TurnErrorKind::Upstream(kind), "upstream_error"),
    };
    let what = match e {
        BackendError::Http { status, .. } => format!("the model server answered HTTP {status}"),
        BackendError::Connect { .. } => "the model server cannot be reached".to_string(),
        BackendError::Timeout { secs, .. } => {
            format!("the model server did not answer within {secs} s")
        }
        BackendError::ContextOverflow { .. } => {
            "the prompt does not fit the model's context window".to_string()
        }
        BackendError::Protocol { .. } => "the model server's answer was malformed".to_string(),
        BackendError::Engine { .. } => "the local engine failed".to_string(),
        BackendError::Cancelled { .. } => "cancelled".to_string(),
    };
    TurnError {
        kind,
        code: code.to_string(),
        message: format!("{}: {what}", hop_failed(e.hop())),
        detail: Some(e.to_string()),
    }
}

fn hop_failed(hop: Hop) -> &'static str {
    match hop {
        Hop::Route => "the route hop failed",
        Hop::Answer => "the answer hop failed",
        Hop::Summary => "the summary hop failed",
        Hop::Compaction => "the compaction hop failed",
    }
}

fn finish_of(reason: FinishReason) -> TurnFinish {
    match reason {
        FinishReason::Length => TurnFinish::Length,
        FinishReason::ToolCalls => TurnFinish::ToolCalls,
        FinishReason::ContentFilter => TurnFinish::ContentFilter,
        FinishReason::Stop | FinishReason::Other => TurnFinish::Stop,
    }
}

impl Conversations {
    pub fn new(
        backend: Arc<dyn ChatBackend>,
        profile: Profile,
        served_model: String,
        limits: StoreLimits,
        observer: Arc<dyn ServiceObserver>,
    ) -> Self {
        Conversations {
            backend,
            profile: Arc::new(profile),
            served_model,
            limits,
            store: Mutex::new(Store::default()),
            observer,
            summaries: TaskTracker::new(),
            disk: None,
            speculate: Speculate::Off,
            follow_ups: Default::default(),
        }
    }

    /// Sets whether short follow-ups stay with the previous expert.
    pub fn following_up(mut self, policy: crate::protocol::FollowUps) -> Self {
        self.follow_ups = policy;
        self
    }

    /// Sends a new user turn's answer hop speculatively, with its route hop (see
    /// `mol::speculate`).
    pub fn speculating(mut self, mode: Speculate) -> Self {
        self.speculate = mode;
        self
    }

    /// The conversation a request belongs to: the one it names, else the one its history
    /// continues, else a new one.
    fn conversation_for(&self, input: &TurnInput, earlier: &[ChatMessage]) -> Arc<Conversation> {
        let now = Instant::now();
        let mut store = lock(&self.store);
        self.evict(&mut store, now);
        let found = match &input.conversation {
            Some(id) => store
                .by_id
                .get(id)
                .filter(|c| c.client == input.client && !c.snapshot)
                .cloned(),
            None => store.at_history(&history_key(&input.client, &digest(earlier))),
        };
        let conversation = match found {
            Some(c) => c,
            None => {
                // A named id of another client is not theirs to continue: a fresh one.
                let id = match &input.conversation {
                    Some(id) if !store.by_id.contains_key(id) => id.clone(),
                    _ => new_conversation_id(),
                };
                let c = Arc::new(Conversation {
                    id: id.clone(),
                    client: input.client.clone(),
                    snapshot: false,
                    state: Arc::new(tokio::sync::Mutex::new(State::default())),
                    last_used: Mutex::new(now),
                    bytes: Default::default(),
                });
                store.by_id.insert(id, c.clone());
                self.evict(&mut store, now);
                c
            }
        };
        *lock(&conversation.last_used) = now;
        self.observer.conversations(store.by_id.len());
        conversation
    }

    /// Points the history digest of a committed turn at its conversation.
    fn remember_history(&self, conversation: &Conversation, old: Option<&str>, new: &str) {
        let mut store = lock(&self.store);
        self.evict(&mut store, Instant::now());
        if let Some(old) = old {
            store.unpoint(&history_key(&conversation.client, old), &conversation.id);
        }
        if store.by_id.contains_key(&conversation.id) {
            store.point(history_key(&conversation.client, new), &conversation.id);
        }
    }

    /// Points the history a turn is about to deliver at its conversation, ahead of the commit.
    fn expect_history(&self, conversation: &Conversation, new: &str) {
        let mut store = lock(&self.store);
        if store.by_id.contains_key(&conversation.id) {
            store.point(history_key(&conversation.client, new), &conversation.id);
        }
    }

    /// Takes back what `expect_history` pointed, for a turn that was not delivered.
    fn forget_history(&self, conversation: &Conversation, old: Option<&str>, new: &str) {
        if old == Some(new) {
            return;
        }
        let mut store = lock(&self.store);
        store.unpoint(&history_key(&conversation.client, new), &conversation.id);
    }

    /// How many conversations are held now.
    pub fn len(&self) -> usize {
        lock(&self.store).by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A new conversation holding a copy of the stored response `parent`'s state.
    async fn fork(
        self: &Arc<Self>,
        input: &TurnInput,
        parent: &str,
        split: &Split,
    ) -> Result<Arc<Conversation>, TurnError> {
        let found = {
            let store = lock(&self.store);
            store
                .by_id
                .get(parent)
                .filter(|c| c.client == input.client && c.snapshot)
                .cloned()
        };
        let parent = found.ok_or_else(|| TurnError {
            kind: TurnErrorKind::NotFound,
            code: "previous_response_not_found".into(),
            message: format!("no stored response '{parent}' (unknown, expired, or not stored)"),
            detail: None,
        })?;
        *lock(&parent.last_used) = Instant::now();
        if let Some(disk) = &self.disk {
            disk.touch(&parent.id);
        }
        let mut state = {
            let mut guard = parent.state.lock().await;
            guard.collect_finished();
            // Made once, for the parent: every fork of it shares the hop, and its file gets it.
            if self.resume_lost_summaries(&mut guard, &split.head) {
                self.write_again_after_summaries(&parent, &guard);
            }
            guard.clone()
        };
        // What the client sends besides the new tail is what the parent already holds.
        state.core.digest = Some(digest(&split.earlier));
        Ok(Arc::new(Conversation {
            id: input
                .snapshot_as
                .clone()
                .unwrap_or_else(new_conversation_id),
            client: input.client.clone(),
            state: Arc::new(tokio::sync::Mutex::new(state)),
            last_used: Mutex::new(Instant::now()),
            snapshot: true,
            bytes: Default::default(),
        }))
    }

    /// Keeps `state` as the stored response `id` (a conversation of its own, never found
    /// from history, only forked from). Comes back locked, so that until it is written a fork
    /// of it waits and an eviction passes it by.
    async fn store_snapshot(
        &self,
        conversation: &Conversation,
        id: &str,
        state: State,
    ) -> (Arc<Conversation>, OwnedMutexGuard<State>) {
        let c = Arc::new(Conversation {
            id: id.to_string(),
            client: conversation.client.clone(),
            bytes: state.core.approx_bytes().into(),
            state: Arc::new(tokio::sync::Mutex::new(state)),
            last_used: Mutex::new(Instant::now()),
            snapshot: true,
        });
        // Nobody else has seen it yet: this does not wait.
        let guard = c.state.clone().lock_owned().await;
        let mut store = lock(&self.store);
        store.by_id.insert(id.to_string(), c.clone());
        self.evict(&mut store, Instant::now());
        self.observer.conversations(store.by_id.len());
        (c, guard)
    }

    /// `Store::evict`, and the files of what it dropped deleted with them — under the store's
    /// lock, so a conversation opened again under the same id is written after, never before.
    fn evict(&self, store: &mut Store, now: Instant) {
        let gone = store.evict(&self.limits, now);
        self.forget_on_disk(&gone);
    }

    fn forget_on_disk(&self, ids: &[String]) {
        let Some(disk) = &self.disk else { return };
        let mut deleted = 0;
        for id in ids {
            match disk.remove(id) {
                Ok(existed) => deleted += usize::from(existed),
                Err(e) => self.observer.state(StateEvent::WriteFailed {
                    reason: format!("cannot delete {}: {e}", disk.path_of(id).display()),
                }),
            }
        }
        if deleted > 0 {
            self.observer.state(StateEvent::Deleted(deleted));
        }
    }

    /// Whether `c` is the conversation the store holds under its id (not one it dropped, nor
    /// a fork that is never kept as itself).
    fn holds(&self, c: &Arc<Conversation>) -> bool {
        lock(&self.store)
            .by_id
            .get(&c.id)
            .is_some_and(|held| Arc::ptr_eq(held, c))
    }

    /// Keeps conversations and stored responses in `dir` from now on, and loads what an
    /// earlier run left there. The limits of this run apply to it: entries idle past the TTL
    /// are deleted, and beyond the count or the byte budget the least recently used go.
    /// Damaged files are reported through the observer and skipped, never fatal; a folder
    /// that cannot be created or that another server holds is.
    pub fn persist_to(&mut self, dir: &Path) -> Result<(), StateDirError> {
        let disk = StateDir::open(dir)?;
        // A file is JSON of the text `approx_bytes` counts; one much larger than the whole
        // budget was not written by this server.
        let max_file = (self.limits.max_bytes as u64)
            .saturating_mul(2)
            .saturating_add(1 << 20);
        let report = disk.load::<Core>(self.limits.idle_ttl, max_file);
        for s in report.corrupt {
            self.observer.state(StateEvent::Corrupt {
                file: s.file,
                reason: s.reason,
            });
        }
        for s in report.ignored {
            self.observer.state(StateEvent::Ignored {
                file: s.file,
                reason: s.reason,
            });
        }
        if report.expired > 0 {
            self.observer.state(StateEvent::Deleted(report.expired));
        }
        let now = Instant::now();
        let loaded = report.entries.len();
        let (gone, held) = {
            let store = self.store.get_mut().unwrap_or_else(|p| p.into_inner());
            for e in report.entries {
                let snapshot = e.kind == EntryKind::Response;
                if !snapshot && let Some(d) = &e.body.digest {
                    store.point(history_key(&e.client, d), &e.id);
                }
                let c = Conversation {
                    id: e.id.clone(),
                    client: e.client,
                    snapshot,
                    bytes: e.body.approx_bytes().into(),
                    state: Arc::new(tokio::sync::Mutex::new(State {
                        core: e.body,
                        summaries: Vec::new(),
                    })),
                    // Older than this process's clock can say: as old as it can.
                    last_used: Mutex::new(now.checked_sub(e.idle).unwrap_or(now)),
                };
                store.by_id.insert(e.id, Arc::new(c));
            }
            (store.evict(&self.limits, now), store.by_id.len())
        };
        self.disk = Some(Arc::new(disk));
        self.forget_on_disk(&gone);
        self.observer.state(StateEvent::Loaded(loaded));
        self.observer.conversations(held);
        Ok(())
    }

    /// Forgets idle conversations (and their files) every so often, so the TTL holds while
    /// no request comes to apply it. Ends with the service.
    pub fn spawn_sweeper(self: &Arc<Self>) {
        let every =
            (self.limits.idle_ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let service = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(this) = service.upgrade() else { break };
                let mut store = lock(&this.store);
                this.evict(&mut store, Instant::now());
                this.observer.conversations(store.by_id.len());
            }
        });
    }

    /// Writes `state` as the entry of `c` — called with `c`'s lock held, so two writes of one
    /// entry never cross — and once more when the summaries still running are in. A failure
    /// is reported; the state stays in memory, the previous file intact.
    async fn save(self: &Arc<Self>, c: &Arc<Conversation>, state: &State) {
        self.write_entry(c, state).await;
        self.write_again_after_summaries(c, state);
    }

    /// Once the summaries `state` is waiting for are in, writes the entry of `c` again (when
    /// the store still holds it).
    fn write_again_after_summaries(self: &Arc<Self>, c: &Arc<Conversation>, state: &State) {
        if self.disk.is_none() || state.summaries.is_empty() {
            return;
        }
        let pending = state.summaries.clone();
        let this = self.clone();
        let c = c.clone();
        self.summaries.spawn(async move {
            for s in &pending {
                s.text.clone().await;
            }
            let mut state = c.state.lock().await;
            state.collect_finished();
            let recorded = pending.iter().all(|s| {
                state
                    .core
                    .timeline
                    .task(s.task_id)
                    .is_none_or(|t| t.summary != SummaryState::Pending)
            });
            if recorded && this.holds(&c) {
                this.write_entry(&c, &state).await;
            }
        });
    }

    async fn write_entry(&self, c: &Conversation, state: &State) {
        let Some(disk) = self.disk.clone() else {
            return;
        };
        let kind = if c.snapshot {
            EntryKind::Response
        } else {
            EntryKind::Conversation
        };
        let bytes = match persist::encode(kind, &c.id, &c.client, &state.core) {
            Ok(b) => b,
            Err(e) => {
                self.observer.state(StateEvent::WriteFailed {
                    reason: format!("cannot encode conversation {}: {e}", c.id),
                });
                return;
            }
        };
        let id = c.id.clone();
        let path = disk.path_of(&id);
        // fsync takes milliseconds: not on the threads that serve requests.
        let written = tokio::task::spawn_blocking(move || disk.write(&id, &bytes)).await;
        match written {
            Ok(Ok(())) => self.observer.state(StateEvent::Persisted),
            Ok(Err(e)) => self.observer.state(StateEvent::WriteFailed {
                reason: format!("cannot write {}: {e}", path.display()),
            }),
            Err(e) => self.observer.state(StateEvent::WriteFailed {
                reason: format!("writing {} failed: {e}", path.display()),
            }),
        }
    }

    /// The summary hop of a closed task, in the background; shared, so the conversation, its
    /// stored responses and their forks wait for the same hop.
    /// `request`: the summary request of task `task_id` (`summary_request_extending`: the
    /// owner's last answer request, with its tools, plus the summary prompt).
    fn spawn_summary(&self, task_id: u64, request: ChatRequest) -> PendingSummary {
        let backend = self.backend.clone();
        let observer = self.observer.clone();
        let handle = self.summaries.spawn(async move {
            let outcome = crate::mol::summary::run(backend.as_ref(), request).await;
            observer.hop(HopSample {
                hop: Hop::Summary,
                latency: outcome.latency,
                usage: outcome.usage,
                ok: outcome.error.is_none(),
            });
            outcome.text
        });
        // A summary task that panicked is an empty summary, never a stuck turn.
        let text = handle.map(Result::unwrap_or_default).boxed().shared();
        PendingSummary { task_id, text }
    }

    /// Closed tasks still waiting for a summary that no hop is making (the server that
    /// started it stopped before it was in): made now, while this turn routes. Returns
    /// whether it started any.
    fn resume_lost_summaries(&self, state: &mut State, head: &[ChatMessage]) -> bool {
        let mut started = false;
        for id in state.core.timeline.pending_summaries() {
            if state.summaries.iter().any(|s| s.task_id == id) {
                continue;
            }
            if let Some(task) = state.core.timeline.task(id) {
                let head = self.view_head(head, &state.core.context);
                // The tools the answer hops offered are not kept across a restart.
                let request = self.summary_request(&state.core.timeline, task, &head, Vec::new());
                let pending = self.spawn_summary(id, request);
                state.summaries.push(pending);
                started = true;
            }
        }
        started
    }

    async fn start(self: &Arc<Self>, input: TurnInput) -> Result<TurnHandle, TurnError> {
        let split = split(&input.messages)?;
        let conversation = match &input.fork_from {
            Some(parent) => self.fork(&input, parent, &split).await?,
            None => self.conversation_for(&input, &split.earlier),
        };
        let guard = conversation.state.clone().lock_owned().await;
        let (tx, rx) = mpsc::channel(256);
        let (delivered_tx, delivered_rx) = oneshot::channel();
        let this = self.clone();
        let conversation_id = conversation.id.clone();
        // Tracked like the summaries: a drain waits for running turns, which start their
        // summaries before they end.
        self.summaries.spawn(async move {
            this.run_turn(conversation, guard, input, split, tx, delivered_rx)
                .await;
        });
        Ok(TurnHandle {
            conversation_id,
            events: rx,
            delivered: delivered_tx,
        })
    }

    async fn run_turn(
        self: Arc<Self>,
        conversation: Arc<Conversation>,
        mut state: OwnedMutexGuard<State>,
        input: TurnInput,
        split: Split,
        tx: mpsc::Sender<TurnEvent>,
        delivered: oneshot::Receiver<()>,
    ) {
        state.collect_finished();
        if self.resume_lost_summaries(&mut state, &split.head) {
            // Kept even if this turn fails.
            self.write_again_after_summaries(&conversation, &state);
        }
        let work = tokio::select! {
            result = self.turn(&conversation, &mut state, &input, &split, &tx) => result,
            // The client is gone: nothing to deliver, nothing to keep.
            _ = tx.closed() => return,
        };
        let (work, done, restarted) = match work {
            Ok(w) => w,
            Err(e) => {
                let _ = tx.send(TurnEvent::Error(e)).await;
                return;
            }
        };
        let old_digest = state.core.digest.clone();
        let new_digest = work.digest.clone().unwrap_or_default();
        // A client that sends no id may send its next request the moment the last byte is
        // out, before this commit: its history must already lead here (it then waits for this
        // conversation's lock), not to a new conversation that lacks the turn.
        self.expect_history(&conversation, &new_digest);
        if tx.send(TurnEvent::Done(done.clone())).await.is_err() || delivered.await.is_err() {
            self.forget_history(&conversation, old_digest.as_deref(), &new_digest);
            return;
        }
        let closed_task = done
            .summary_started
            .then(|| work.timeline.tasks.last().cloned())
            .flatten();
        if restarted {
            // Started over: the summaries still running belong to the history left behind.
            state.summaries.clear();
        }
        state.core = work;
        conversation.bytes.store(
            state.core.approx_bytes(),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.remember_history(&conversation, old_digest.as_deref(), &new_digest);
        if let Some(task) = closed_task {
            let head = self.view_head(&split.head, &state.core.context);
            let request =
                self.summary_request(&state.core.timeline, &task, &head, input.tools.clone());
            let pending = self.spawn_summary(task.id, request);
            state.summaries.push(pending);
        }
        let snapshot = match &input.snapshot_as {
            Some(id) => Some(self.store_snapshot(&conversation, id, state.clone()).await),
            None => None,
        };
        if self.disk.is_some() {
            if !conversation.snapshot && self.holds(&conversation) {
                self.save(&conversation, &state).await;
            }
            if let Some((c, guard)) = &snapshot
                && self.holds(c)
            {
                self.save(c, guard).await;
            }
        }
    }

    /// The summary request of a closed `task`: its owner's view up to it (as the last answer
    /// hop saw it, `tools` included) plus the summary prompt, so the engine's prefix cache
    /// holds all but the prompt. The agent sends the same (`agent::summaries`).
    fn summary_request(
        &self,
        timeline: &Timeline,
        task: &Task,
        head: &[ChatMessage],
        tools: Vec<crate::protocol::ToolSpec>,
    ) -> ChatRequest {
        crate::mol::summary_request_for(
            self.backend.as_ref(),
            &self.profile,
            timeline,
            task,
            head,
            tools,
        )
    }

    /// The system head every hop of a conversation shows: the client's system messages with
    /// the identity prompt, then history brought from elsewhere.
    fn view_head(&self, head: &[ChatMessage], context: &[ChatMessage]) -> Vec<ChatMessage> {
        let mut out = with_identity(head, &self.profile.intro);
        out.extend(context.iter().cloned());
        out
    }

    /// Route and answer on a copy of the conversation; the copy and the answer come back.
    async fn turn(
        &self,
        conversation: &Conversation,
        state: &mut State,
        input: &TurnInput,
        split: &Split,
        tx: &mpsc::Sender<TurnEvent>,
    ) -> Result<(Core, TurnDone, bool), TurnError> {
        let continues = state.core.digest.as_deref() == Some(digest(&split.earlier).as_str());
        // Not the history this conversation holds: start over from the client's (committed
        // only with the turn).
        let mut work = if continues {
            state.core.clone()
        } else {
            Core {
                context: split.earlier.clone(),
                ..Core::default()
            }
        };
        let step = match &split.tail {
            Tail::User(text) => Step::UserTurn {
                text,
                open_owner: work.timeline.open_task().map(|t| t.owner),
                follow_up: crate::mol::follow_up_expert(self.follow_ups, &work.timeline, text),
            },
            Tail::ToolResults(results) => {
                let pending = work.pending_tools.clone().ok_or_else(|| {
                    TurnError::bad_request(
                        "orphan_tool_turn",
                        "tool results, but this conversation has no tool calls waiting for them",
                    )
                })?;
                let given: HashSet<&str> = results
                    .iter()
                    .filter_map(|m| m.tool_call_id.as_deref())
                    .collect();
                let wanted: HashSet<&str> = pending.ids.iter().map(String::as_str).collect();
                if given != wanted || given.len() != results.len() {
                    return Err(TurnError::bad_request(
                        "invalid_tool_outputs",
                        format!(
                            "the tool results must answer exactly the pending calls ({})",
                            pending.ids.join(", ")
                        ),
                    ));
                }
                Step::ToolResults {
                    issuer: pending.expert,
                }
            }
        };
        let speculation = match (&split.tail, step) {
            // A follow-up needs no route hop, so there is nothing to speculate past.
            (
                _,
                Step::UserTurn {
                    follow_up: Some(_), ..
                },
            ) => None,
            (Tail::User(text), _) => self.speculate(&work, &split.head, input, text),
            (Tail::ToolResults(_), _) => None,
        };
        let choice = decide(
            self.backend.as_ref(),
            &self.profile,
            Mode::Mol,
            None,
            step,
            || {},
        )
        .await;
        let choice = match choice {
            Ok(c) => c,
            Err(e) => {
                if let Some(s) = speculation {
                    self.observer.speculation(s.cancel());
                }
                self.observer.hop(HopSample {
                    hop: Hop::Route,
                    latency: Duration::ZERO,
                    usage: TokenUsage::default(),
                    ok: false,
                });
                return Err(upstream_error(&e));
            }
        };
        if let Some(hop) = choice.route_hop {
            self.observer.hop(HopSample {
                hop: Hop::Route,
                latency: hop.latency,
                usage: hop.usage,
                ok: choice.reason.is_none(),
            });
        }
        self.observer.route(choice.expert, choice.decision);
        let expert = choice.expert;
        // A miss stops at once, before anything else the turn waits for.
        let speculation = match speculation {
            Some(s) if s.expert() != expert => {
                self.observer.speculation(s.cancel());
                None
            }
            other => other,
        };
        // The summaries this expert's view shows must be in before it answers; the route hop
        // above ran while they were being made.
        let needed = work.timeline.summaries_needed_by(expert);
        if !needed.is_empty() {
            state.await_summaries(&needed).await;
            for id in needed {
                if let Some(t) = state.core.timeline.task(id) {
                    let summary = t.summary.clone();
                    if let Some(w) = work.timeline.task_mut(id) {
                        w.summary = summary;
                    }
                }
            }
        }
        match &split.tail {
            Tail::User(text) => {
                work.timeline.open(expert, text.clone());
                work.pending_tools = None;
            }
            Tail::ToolResults(results) => {
                for r in results {
                    work.timeline.push(r.clone());
                }
            }
        }
        let completed_tasks = work.timeline.tasks.iter().filter(|t| t.closed).count();
        let _ = tx
            .send(TurnEvent::Routed(TurnRouted {
                conversation_id: conversation.id.clone(),
                expert,
                decision: choice.decision,
                fallback_reason: choice.reason.clone(),
                completed_tasks,
            }))
            .await;

        let request = self.answer_request(expert, &work, &split.head, input);
        let (held, started) = match speculation.map(|s| s.resolve(expert, &request)) {
            Some(Resolved::Hit { stream, started }) => {
                self.observer.speculation(speculate::hit_sample());
                (Some(stream), started)
            }
            Some(Resolved::Miss(sample)) => {
                self.observer.speculation(sample);
                (None, Instant::now())
            }
            None => (None, Instant::now()),
        };
        let answered = self.answer(request, held, tx).await;
        let latency = started.elapsed();
        let mut done = match answered {
            Ok(done) => done,
            Err(e) => {
                self.observer.hop(HopSample {
                    hop: Hop::Answer,
                    latency,
                    usage: TokenUsage::default(),
                    ok: false,
                });
                return Err(upstream_error(&e));
            }
        };
        let usage = done.usage.unwrap_or_default();
        self.observer.hop(HopSample {
            hop: Hop::Answer,
            latency,
            usage,
            ok: true,
        });
        let mut finish = finish_of(done.finish_reason);
        if matches!(finish, TurnFinish::Length | TurnFinish::ContentFilter) {
            // A call cut off mid-arguments is no call to run.
            done.message.tool_calls.clear();
        } else if !done.message.tool_calls.is_empty() {
            finish = TurnFinish::ToolCalls;
        }
        if finish == TurnFinish::ToolCalls && done.message.tool_calls.is_empty() {
            finish = TurnFinish::Stop;
        }
        let message = done.message;
        work.timeline.push(message.clone());
        let pending_tool_expert = if message.tool_calls.is_empty() {
            work.timeline.close(true);
            work.pending_tools = None;
            None
        } else {
            work.pending_tools = Some(PendingTools {
                expert,
                ids: message.tool_calls.iter().map(|c| c.id.clone()).collect(),
            });
            Some(expert)
        };
        let mut after = split.after_head.clone();
        after.push(message.clone());
        work.digest = Some(digest(&after));
        Ok((
            work,
            TurnDone {
                message,
                finish,
                usage,
                pending_tool_expert,
                summary_started: pending_tool_expert.is_none(),
            },
            !continues,
        ))
    }

    /// `expert`'s answer request over `work`, the turn's copy of the conversation.
    fn answer_request(
        &self,
        expert: Expert,
        work: &Core,
        head: &[ChatMessage],
        input: &TurnInput,
    ) -> ChatRequest {
        let head = self.view_head(head, &work.context);
        let o = &input.options;
        let options = AnswerOptions {
            temperature: o.temperature,
            top_p: o.top_p,
            seed: o.seed,
            stop: o.stop.clone(),
            tool_choice: o.tool_choice.clone(),
            parallel_tool_calls: o.parallel_tool_calls,
            max_tokens: o.max_tokens,
            reasoning: o.reasoning,
            extra: o.extra.clone(),
        };
        answer_hop_request(
            Mode::Mol,
            &self.profile,
            AnswerInput {
                expert,
                timeline: &work.timeline,
                head: &head,
                tools: input.tools.clone(),
                options,
                model: None,
                conversation_id: None,
            },
        )
    }

    /// The speculative answer of a new user turn, sent before its route hop: the request the
    /// turn would send the expert it bets on, built on a copy with the task opened.
    fn speculate(
        &self,
        work: &Core,
        head: &[ChatMessage],
        input: &TurnInput,
        text: &str,
    ) -> Option<Speculation> {
        let open_owner = work.timeline.open_task().map(|t| t.owner);
        let expert = speculate::speculative_expert(self.speculate, &work.timeline, open_owner)?;
        if !speculate::view_is_ready(&work.timeline, expert) {
            return None;
        }
        let mut bet = work.clone();
        bet.timeline.open(expert, text.to_string());
        let request = self.answer_request(expert, &bet, head, input);
        Speculation::start(&self.backend, expert, request)
            .map_err(|skipped| self.observer.speculation(skipped))
            .ok()
    }

    /// Streams the answer hop, passing text and reasoning on as they come: from `held`, the
    /// speculative answer that was a hit, else from a request sent now.
    async fn answer(
        &self,
        request: ChatRequest,
        held: Option<ChatStream>,
        tx: &mpsc::Sender<TurnEvent>,
    ) -> Result<crate::backend::ChatCompletion, BackendError> {
        let mut stream = match held {
            Some(stream) => stream,
            None => self.backend.chat(request).await?,
        };
        while let Some(item) = stream.next().await {
            match item? {
                ChatDelta::Text(t) => {
                    let _ = tx.send(TurnEvent::Text(t)).await;
                }
                ChatDelta::Reasoning(t) => {
                    let _ = tx.send(TurnEvent::Reasoning(t)).await;
                }
                ChatDelta::ToolCallStarted { .. } | ChatDelta::ToolCallArguments { .. } => {}
                ChatDelta::Completed(done) => return Ok(done),
            }
        }
        Err(BackendError::Protocol {
            hop: Hop::Answer,
            url: self.backend.describe(),
            message: "the response stream ended without a completion".into(),
        })
    }
}

/// The service a frontend holds: the conversations behind an `Arc`, since every turn runs in
/// a task of its own.
pub struct ConversationService(pub Arc<Conversations>);

impl MolService for ConversationService {
    fn served_model(&self) -> &str {
        &self.0.served_model
    }

    fn start_turn(&self, input: TurnInput) -> ServiceFuture<'_, Result<TurnHandle, TurnError>> {
        Box::pin(async move { self.0.start(input).await })
    }

    fn ready(&self) -> ServiceFuture<'_, bool> {
        Box::pin(async move {
            tokio::time::timeout(Duration::from_secs(2), self.0.backend.list_models())
                .await
                .is_ok_and(|r| r.is_ok())
        })
    }

    fn drain(&self) -> ServiceFuture<'_, ()> {
        Box::pin(async move {
            self.0.summaries.close();
            self.0.summaries.wait().await;
            self.0.summaries.reopen();
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::protocol::{RouteDecision, TurnOptions};

    struct Quiet;
    impl ServiceObserver for Quiet {
        fn hop(&self, _sample: HopSample) {}
        fn route(&self, _expert: Expert, _decision: RouteDecision) {}
    }

    fn input(messages: Vec<ChatMessage>) -> TurnInput {
        TurnInput {
            conversation: None,
            client: "client".into(),
            messages,
            tools: Vec::new(),
            options: TurnOptions::default(),
            fork_from: None,
            snapshot_as: None,
        }
    }

    /// A service whose every answer comes from L2.
    fn l2_service() -> Arc<Conversations> {
        Arc::new(Conversations::new(
            Arc::new(crate::mol::fake_backend::Router::answering("L2")),
            Profile::builtin(&Default::default()),
            "m".into(),
            StoreLimits::default(),
            Arc::new(Quiet),
        ))
    }

    /// The answer of a turn's handle, once it is done; `delivered` is left to the caller.
    async fn answer(handle: &mut TurnHandle) -> String {
        while let Some(ev) = handle.events.recv().await {
            match ev {
                TurnEvent::Done(d) => return d.message.content,
                TurnEvent::Error(e) => panic!("{e}"),
                _ => {}
            }
        }
        panic!("no Done")
    }

    #[tokio::test]
    async fn a_request_that_arrives_before_the_commit_still_continues_its_conversation() {
        let service = l2_service();
        let mut first = service
            .start(input(vec![ChatMessage::user("a")]))
            .await
            .unwrap();
        let text = answer(&mut first).await;
        // The client has the whole answer and sends its next request before the server has
        // committed the turn (the commit waits for `delivered`).
        let next = input(vec![
            ChatMessage::user("a"),
            ChatMessage::assistant(&text),
            ChatMessage::user("b"),
        ]);
        let waiting = tokio::spawn({
            let service = service.clone();
            async move { service.start(next).await.map(|h| h.conversation_id) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "it waits for the turn before it");
        let _ = first.delivered.send(());
        let second = waiting.await.unwrap().unwrap();
        assert_eq!(second, first.conversation_id);
        assert_eq!(service.len(), 1);
    }

    /// Two clients whose first turns were identical (k trials of one task at temperature 0)
    /// each continue a conversation of their own: the second's turn 2 is not left without one
    /// because the first's turn 2 moved "the" conversation at that history on.
    #[tokio::test]
    async fn identical_first_turns_of_two_clients_keep_two_conversations() {
        let service = l2_service();
        let mut firsts = Vec::new();
        for _ in 0..2 {
            let mut h = service
                .start(input(vec![ChatMessage::user("a")]))
                .await
                .unwrap();
            let text = answer(&mut h).await;
            let _ = h.delivered.send(());
            firsts.push((h.conversation_id, text));
        }
        assert_ne!(firsts[0].0, firsts[1].0);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut seconds = Vec::new();
        for next in ["from A", "from B"] {
            let mut h = service
                .start(input(vec![
                    ChatMessage::user("a"),
                    ChatMessage::assistant(&firsts[0].1),
                    ChatMessage::user(next),
                ]))
                .await
                .unwrap();
            answer(&mut h).await;
            let _ = h.delivered.send(());
            tokio::time::sleep(Duration::from_millis(50)).await;
            seconds.push(h.conversation_id);
        }
        assert_ne!(seconds[0], seconds[1], "each continues its own");
        for id in &seconds {
            assert!(
                firsts.iter().any(|(f, _)| f == id),
                "{id} is a continuation"
            );
        }
        assert_eq!(service.len(), 2);
    }

    #[tokio::test]
    async fn a_turn_not_delivered_leaves_its_history_pointing_nowhere() {
        let service = l2_service();
        let mut first = service
            .start(input(vec![ChatMessage::user("a")]))
            .await
            .unwrap();
        let text = answer(&mut first).await;
        let TurnHandle {
            conversation_id,
            events,
            delivered,
        } = first;
        drop((events, delivered));
        // The rollback runs in the turn's task; give it a moment.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let later = service
            .start(input(vec![
                ChatMessage::user("a"),
                ChatMessage::assistant(&text),
                ChatMessage::user("b"),
            ]))
            .await
            .unwrap();
        assert_ne!(later.conversation_id, conversation_id);
    }

    #[test]
    fn requests_split_into_head_history_and_tail() {
        let msgs = vec![
            ChatMessage::system("s"),
            ChatMessage::user("a"),
            ChatMessage::assistant("b"),
            ChatMessage::user("c"),
        ];
        let s = split(&msgs).unwrap();
        assert_eq!(s.head.len(), 1);
        assert_eq!(s.earlier.len(), 2);
        assert!(matches!(s.tail, Tail::User(ref t) if t == "c"));
        let mut tools = msgs.clone();
        tools.push(ChatMessage::tool_result("1", "x"));
        tools.push(ChatMessage::tool_result("2", "y"));
        let s = split(&tools).unwrap();
        assert!(matches!(s.tail, Tail::ToolResults(ref r) if r.len() == 2));
        assert_eq!(s.earlier.len(), 3);
        assert!(split(&[ChatMessage::system("s")]).is_err());
        assert_eq!(
            split(&[ChatMessage::assistant("x")]).err().unwrap().code,
            "invalid_messages"
        );
    }

    fn held(id: &str, bytes: usize, age: Duration) -> Arc<Conversation> {
        Arc::new(Conversation {
            id: id.into(),
            client: "c".into(),
            snapshot: false,
            bytes: bytes.into(),
            state: Default::default(),
            last_used: Mutex::new(Instant::now() - age),
        })
    }

    #[test]
    fn the_store_drops_the_least_recently_used_past_its_count_bytes_and_ttl() {
        let limits = StoreLimits {
            max_conversations: 3,
            idle_ttl: Duration::from_secs(60),
            max_bytes: 1000,
        };
        let mut store = Store::default();
        for (id, bytes, age) in [
            ("old", 400, 30),
            ("mid", 400, 20),
            ("new", 400, 10),
            ("stale", 1, 120),
        ] {
            store
                .by_id
                .insert(id.into(), held(id, bytes, Duration::from_secs(age)));
            store.point(format!("c\0{id}"), id);
        }
        store.evict(&limits, Instant::now());
        let mut left: Vec<&str> = store.by_id.keys().map(String::as_str).collect();
        left.sort();
        assert_eq!(left, ["mid", "new"], "stale by TTL, old by bytes");
        assert!(
            !store
                .by_history
                .values()
                .flatten()
                .any(|v| v == "old" || v == "stale")
        );
        // A conversation whose turn is running is never dropped under it.
        let busy = held("busy", 5000, Duration::from_secs(50));
        let _guard = busy.state.try_lock().unwrap();
        store.by_id.insert("busy".into(), busy.clone());
        store.evict(&limits, Instant::now());
        assert!(store.by_id.contains_key("busy"));
    }

    #[test]
    fn the_digest_ignores_reasoning_and_whitespace_but_not_text() {
        let mut a = ChatMessage::assistant("hi ");
        a.reasoning = Some("thinking".into());
        let b = ChatMessage::assistant("hi");
        assert_eq!(digest(&[a]), digest(std::slice::from_ref(&b)));
        assert_ne!(digest(&[b]), digest(&[ChatMessage::assistant("ho")]));
        assert_ne!(
            digest(&[ChatMessage::user("x")]),
            digest(&[ChatMessage::assistant("x")])
        );
    }
}
