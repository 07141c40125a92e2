//! The state folder: committed turns written (again once their summaries are in), loaded back.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::Conversations;
use super::state::{Core, State};
use super::store::{Conversation, Key, history_key};
use crate::mol::persist::{self, EntryKind, StateDir, StateDirError};
use crate::mol::timeline::SummaryState;
use crate::protocol::StateEvent;

impl Conversations {
    pub(super) fn forget_on_disk(&self, keys: &[Key]) {
        let Some(disk) = &self.disk else { return };
        let mut deleted = 0;
        for k in keys {
            match disk.remove(&k.client, &k.id) {
                Ok(existed) => deleted += usize::from(existed),
                Err(e) => self.observer.state(StateEvent::WriteFailed {
                    reason: format!(
                        "cannot delete {}: {e}",
                        disk.path_of(&k.client, &k.id).display()
                    ),
                }),
            }
        }
        if deleted > 0 {
            self.observer.state(StateEvent::Deleted(deleted));
        }
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
                // Held under its owner, as it was written: a restart keeps clients apart.
                let key = Key {
                    client: e.client,
                    id: e.id,
                };
                if !snapshot && let Some(d) = &e.body.digest {
                    store.point(history_key(&key.client, d), &key);
                }
                let c = Conversation {
                    key: key.clone(),
                    snapshot,
                    bytes: e.body.approx_bytes().into(),
                    state: Arc::new(tokio::sync::Mutex::new(State {
                        core: e.body,
                        summaries: Vec::new(),
                    })),
                    // Older than this process's clock can say: as old as it can.
                    last_used: Mutex::new(now.checked_sub(e.idle).unwrap_or(now)),
                };
                store.by_id.insert(key, Arc::new(c));
            }
            (store.evict(&self.limits, now), store.by_id.len())
        };
        self.disk = Some(Arc::new(disk));
        self.forget_on_disk(&gone);
        self.observer.state(StateEvent::Loaded(loaded));
        self.observer.conversations(held);
        Ok(())
    }

    /// Writes `state` as the entry of `c` — called with `c`'s lock held, so two writes of one
    /// entry never cross — and once more when the summaries still running are in. A failure
    /// is reported; the state stays in memory, the previous file intact.
    pub(super) async fn save(self: &Arc<Self>, c: &Arc<Conversation>, state: &State) {
        self.write_entry(c, state).await;
        self.write_again_after_summaries(c, state);
    }

    /// Once the summaries `state` is waiting for are in, writes the entry of `c` again (when
    /// the store still holds it).
    pub(super) fn write_again_after_summaries(
        self: &Arc<Self>,
        c: &Arc<Conversation>,
        state: &State,
    ) {
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
        let Key { client, id } = c.key.clone();
        let bytes = match persist::encode(kind, &id, &client, &state.core) {
            Ok(b) => b,
            Err(e) => {
                self.observer.state(StateEvent::WriteFailed {
                    reason: format!("cannot encode conversation {id}: {e}"),
                });
                return;
            }
        };
        let path = disk.path_of(&client, &id);
        // fsync takes milliseconds: not on the threads that serve requests.
        let written = tokio::task::spawn_blocking(move || disk.write(&client, &id, &bytes)).await;
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
}
