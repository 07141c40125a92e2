//! The conversations held in memory: found by id or history, forked, evicted by LRU and TTL.
//! Every id is a client's own ([`Key`]): what one client names never finds, replaces or
//! reveals another's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;

use super::Conversations;
use super::request::{Split, digest};
use super::state::State;
use crate::protocol::{ChatMessage, TurnError, TurnErrorKind, TurnInput};

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

/// Where a conversation or stored response is held: its id among its client's own. Each client
/// (API key; all of them one without keys) has a namespace of ids, so two clients naming one
/// id hold two conversations, and neither can tell whether the other has one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    /// The client: a digest of its API key (`serve::auth`), never the key.
    pub(super) client: String,
    pub(super) id: String,
}

impl Key {
    pub(super) fn new(client: &str, id: &str) -> Key {
        Key {
            client: client.to_string(),
            id: id.to_string(),
        }
    }
}

pub(super) struct Conversation {
    pub(super) key: Key,
    /// A stored response: forked from, never continued in place or found from history.
    pub(super) snapshot: bool,
    /// Approximate size of its state, as of its last committed turn.
    pub(super) bytes: std::sync::atomic::AtomicUsize,
    pub(super) state: Arc<tokio::sync::Mutex<State>>,
    pub(super) last_used: Mutex<Instant>,
}

#[derive(Default)]
pub(super) struct Store {
    pub(super) by_id: HashMap<Key, Arc<Conversation>>,
    /// `client \0 digest` → the conversations at that history, oldest first: finds a
    /// conversation from its history alone. Two clients whose first turns were identical
    /// hold two conversations at one history, and each continues one of them.
    pub(super) by_history: HashMap<String, Vec<Key>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn history_key(client: &str, digest: &str) -> String {
    format!("{client}\0{digest}")
}

impl Store {
    /// Forgets conversations idle past the TTL, then the least recently used beyond the cap;
    /// returns their keys. A conversation whose turn is running is never dropped under it.
    pub(super) fn evict(&mut self, limits: &StoreLimits, now: Instant) -> Vec<Key> {
        let idle: Vec<Key> = self
            .by_id
            .values()
            .filter(|c| now.duration_since(*lock(&c.last_used)) > limits.idle_ttl)
            .filter(|c| c.state.try_lock().is_ok())
            .map(|c| c.key.clone())
            .collect();
        for key in &idle {
            self.remove(key);
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
                .map(|c| c.key.clone());
            match oldest {
                Some(key) => {
                    if let Some(c) = self.by_id.get(&key) {
                        bytes = bytes
                            .saturating_sub(c.bytes.load(std::sync::atomic::Ordering::Relaxed));
                    }
                    self.remove(&key);
                    gone.push(key);
                }
                None => break,
            }
        }
        gone
    }

    pub(super) fn remove(&mut self, key: &Key) {
        if self.by_id.remove(key).is_some() {
            self.by_history.retain(|_, held| {
                held.retain(|v| v != key);
                !held.is_empty()
            });
        }
    }

    /// Records that the conversation `key` is at history `history`.
    pub(super) fn point(&mut self, history: String, key: &Key) {
        let held = self.by_history.entry(history).or_default();
        if !held.contains(key) {
            held.push(key.clone());
        }
    }

    /// Takes back that the conversation `key` is at history `history`.
    fn unpoint(&mut self, history: &str, key: &Key) {
        if let Some(held) = self.by_history.get_mut(history) {
            held.retain(|v| v != key);
            if held.is_empty() {
                self.by_history.remove(history);
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
            .filter_map(|k| self.by_id.get(k))
            .collect();
        held.iter()
            .find(|c| c.state.try_lock().is_ok())
            .or(held.first())
            .map(|c| (*c).clone())
    }
}

/// A new conversation id: matches the `X-Conversation-Id` syntax clients echo.
pub(super) fn new_conversation_id() -> String {
    format!("conv_{}", uuid::Uuid::now_v7().simple())
}

impl Conversations {
    /// The conversation a request belongs to: the one it names, else the one its history
    /// continues, else a new one — always among the client's own.
    pub(super) fn conversation_for(
        &self,
        input: &TurnInput,
        earlier: &[ChatMessage],
    ) -> Arc<Conversation> {
        let now = Instant::now();
        let mut store = lock(&self.store);
        self.evict(&mut store, now);
        let named = input
            .conversation
            .as_deref()
            .map(|id| Key::new(&input.client, id));
        let found = match &named {
            Some(key) => store.by_id.get(key).filter(|c| !c.snapshot).cloned(),
            None => store.at_history(&history_key(&input.client, &digest(earlier))),
        };
        let conversation = match found {
            Some(c) => c,
            None => {
                // A named id is looked up among the client's own ids only, so whether another
                // client holds it changes nothing here: it is echoed, a fresh conversation.
                // Only the client's own stored response can hold it already (never continued
                // in place): that one gets a new id.
                let key = match named {
                    Some(key) if !store.by_id.contains_key(&key) => key,
                    _ => Key::new(&input.client, &new_conversation_id()),
                };
                let c = Arc::new(Conversation {
                    key: key.clone(),
                    snapshot: false,
                    state: Arc::new(tokio::sync::Mutex::new(State::default())),
                    last_used: Mutex::new(now),
                    bytes: Default::default(),
                });
                store.by_id.insert(key, c.clone());
                self.evict(&mut store, now);
                c
            }
        };
        *lock(&conversation.last_used) = now;
        self.observer.conversations(store.by_id.len());
        conversation
    }

    /// Points the history digest of a committed turn at its conversation.
    pub(super) fn remember_history(
        &self,
        conversation: &Conversation,
        old: Option<&str>,
        new: &str,
    ) {
        let mut store = lock(&self.store);
        self.evict(&mut store, Instant::now());
        let key = &conversation.key;
        if let Some(old) = old {
            store.unpoint(&history_key(&key.client, old), key);
        }
        if store.by_id.contains_key(key) {
            store.point(history_key(&key.client, new), key);
        }
    }

    /// Points the history a turn is about to deliver at its conversation, ahead of the commit.
    pub(super) fn expect_history(&self, conversation: &Conversation, new: &str) {
        let mut store = lock(&self.store);
        let key = &conversation.key;
        if store.by_id.contains_key(key) {
            store.point(history_key(&key.client, new), key);
        }
    }

    /// Takes back what `expect_history` pointed, for a turn that was not delivered.
    pub(super) fn forget_history(&self, conversation: &Conversation, old: Option<&str>, new: &str) {
        if old == Some(new) {
            return;
        }
        let mut store = lock(&self.store);
        let key = &conversation.key;
        store.unpoint(&history_key(&key.client, new), key);
    }

    /// A new conversation holding a copy of the stored response `parent`'s state. Another
    /// client's response id is looked up among this client's and not found, like one that
    /// never existed: the same error, by the same path.
    pub(super) async fn fork(
        self: &Arc<Self>,
        input: &TurnInput,
        parent: &str,
        split: &Split,
    ) -> Result<Arc<Conversation>, TurnError> {
        let found = {
            let store = lock(&self.store);
            store
                .by_id
                .get(&Key::new(&input.client, parent))
                .filter(|c| c.snapshot)
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
            disk.touch(&parent.key.client, &parent.key.id);
        }
        let mut state = {
            let mut guard = parent.state.lock().await;
            // A reserved response whose turn was not delivered after all.
            if !self.holds(&parent) {
                return Err(TurnError {
                    kind: TurnErrorKind::NotFound,
                    code: "previous_response_not_found".into(),
                    message: format!("no stored response '{}' (its turn failed)", parent.key.id),
                    detail: None,
                });
            }
            guard.collect_finished();
            // Made once, for the parent: every fork of it shares the hop, and its file gets it.
            if self.resume_lost_summaries(&mut guard, &split.head) {
                self.write_again_after_summaries(&parent, &guard);
            }
            guard.clone()
        };
        // What the client sends besides the new tail is what the parent already holds.
        state.core.digest = Some(digest(&split.earlier));
        let id = input
            .snapshot_as
            .clone()
            .unwrap_or_else(new_conversation_id);
        Ok(Arc::new(Conversation {
            key: Key::new(&input.client, &id),
            state: Arc::new(tokio::sync::Mutex::new(state)),
            last_used: Mutex::new(Instant::now()),
            snapshot: true,
            bytes: Default::default(),
        }))
    }

    /// Holds the stored response `id` (a conversation of its own, never found from history,
    /// only forked from) before its turn is delivered: empty, and locked until the commit
    /// fills it, so a fork asked for the moment the client has the response waits for it (and
    /// an eviction passes it by).
    pub(super) async fn reserve_snapshot(
        &self,
        conversation: &Conversation,
        id: &str,
    ) -> (Arc<Conversation>, OwnedMutexGuard<State>) {
        let c = Arc::new(Conversation {
            key: Key::new(&conversation.key.client, id),
            bytes: Default::default(),
            state: Arc::new(tokio::sync::Mutex::new(State::default())),
            last_used: Mutex::new(Instant::now()),
            snapshot: true,
        });
        // Nobody else has seen it yet: this does not wait.
        let guard = c.state.clone().lock_owned().await;
        let mut store = lock(&self.store);
        store.by_id.insert(c.key.clone(), c.clone());
        self.evict(&mut store, Instant::now());
        self.observer.conversations(store.by_id.len());
        (c, guard)
    }

    /// Takes back a reserved stored response whose turn was not delivered.
    pub(super) fn forget_snapshot(&self, c: &Arc<Conversation>) {
        let mut store = lock(&self.store);
        if store
            .by_id
            .get(&c.key)
            .is_some_and(|held| Arc::ptr_eq(held, c))
        {
            store.remove(&c.key);
        }
        self.observer.conversations(store.by_id.len());
    }

    /// `Store::evict`, and the files of what it dropped deleted with them — under the store's
    /// lock, so a conversation opened again under the same id is written after, never before.
    fn evict(&self, store: &mut Store, now: Instant) {
        let gone = store.evict(&self.limits, now);
        self.forget_on_disk(&gone);
    }

    /// Whether `c` is the conversation the store holds under its key (not one it dropped, nor
    /// a fork that is never kept as itself).
    pub(super) fn holds(&self, c: &Arc<Conversation>) -> bool {
        lock(&self.store)
            .by_id
            .get(&c.key)
            .is_some_and(|held| Arc::ptr_eq(held, c))
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: &str, bytes: usize, age: Duration) -> Arc<Conversation> {
        held_by("c", id, bytes, age)
    }

    fn held_by(client: &str, id: &str, bytes: usize, age: Duration) -> Arc<Conversation> {
        Arc::new(Conversation {
            key: Key::new(client, id),
            snapshot: false,
            bytes: bytes.into(),
            state: Default::default(),
            last_used: Mutex::new(Instant::now() - age),
        })
    }

    /// Two clients' conversations of one id are two entries: dropping one leaves the other,
    /// and the other's history still finds it.
    #[test]
    fn dropping_one_clients_conversation_leaves_anothers_of_the_same_id() {
        let mut store = Store::default();
        for client in ["a", "b"] {
            let key = Key::new(client, "same-id");
            store
                .by_id
                .insert(key.clone(), held_by(client, "same-id", 1, Duration::ZERO));
            store.point(history_key(client, "digest"), &key);
        }
        store.remove(&Key::new("a", "same-id"));
        assert!(store.at_history(&history_key("a", "digest")).is_none());
        assert!(store.by_id.contains_key(&Key::new("b", "same-id")));
        assert!(store.at_history(&history_key("b", "digest")).is_some());
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
                .insert(Key::new("c", id), held(id, bytes, Duration::from_secs(age)));
            store.point(format!("c\0{id}"), &Key::new("c", id));
        }
        store.evict(&limits, Instant::now());
        let mut left: Vec<&str> = store.by_id.keys().map(|k| k.id.as_str()).collect();
        left.sort();
        assert_eq!(left, ["mid", "new"], "stale by TTL, old by bytes");
        assert!(
            !store
                .by_history
                .values()
                .flatten()
                .any(|v| v.id == "old" || v.id == "stale")
        );
        // A conversation whose turn is running is never dropped under it.
        let busy = held("busy", 5000, Duration::from_secs(50));
        let _guard = busy.state.try_lock().unwrap();
        store.by_id.insert(busy.key.clone(), busy.clone());
        store.evict(&limits, Instant::now());
        assert!(store.by_id.contains_key(&busy.key));
    }
}
