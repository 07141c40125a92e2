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
//! Every id is a client's own: each client (`TurnInput::client`, a digest of its API key) has
//! a namespace of conversation and stored-response ids, in memory and in the state folder's
//! file names. Another client's id is neither found nor refused — it is this client's own,
//! fresh — so no request can tell whether another client holds an id.
//!
//! With a state folder ([`Conversations::persist_to`], `baton serve --state-dir`) every
//! committed turn is written there too (the conversation, and the stored response it made),
//! again once its summary is in, and deleted when the store drops it; a restart loads it all
//! back. [`crate::mol::persist`] owns the files.
//!
//! `store` holds the conversations (and finds the one a request belongs to), `turn` runs a
//! turn on a copy of one (`request` reads the request, `state` is what a turn changes,
//! `outcome` what the backend's answer becomes), `summaries` makes the summary hops in the
//! background, `disk` keeps it all in the state folder.

mod disk;
mod outcome;
mod request;
mod state;
mod store;
mod summaries;
mod turn;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::backend::ChatBackend;
use crate::mol::persist::StateDir;
use crate::mol::profile::Profile;
use crate::protocol::{
    MolService, ServiceFuture, ServiceObserver, Speculate, TurnError, TurnHandle, TurnInput,
};

pub use store::StoreLimits;
use store::{Store, lock};

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

    /// How many conversations are held now.
    pub fn len(&self) -> usize {
        lock(&self.store).by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    use crate::protocol::{ChatMessage, Expert, HopSample, RouteDecision, TurnEvent, TurnOptions};

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

    /// The Responses API's race (seen once in CI through the OpenAI SDK): the client has a
    /// stored response and forks it before the server has committed the turn. The fork waits
    /// for the commit instead of finding no such response; a turn not delivered leaves none.
    #[tokio::test]
    async fn a_fork_asked_for_before_the_commit_waits_for_the_stored_response() {
        let service = l2_service();
        let stored = |messages, id: &str| TurnInput {
            snapshot_as: Some(id.to_string()),
            ..input(messages)
        };
        let mut first = service
            .start(stored(vec![ChatMessage::user("a")], "resp_first"))
            .await
            .unwrap();
        answer(&mut first).await;
        let fork = TurnInput {
            fork_from: Some("resp_first".into()),
            ..input(vec![ChatMessage::user("b")])
        };
        let waiting = tokio::spawn({
            let service = service.clone();
            async move {
                match service.start(fork).await {
                    Ok(mut h) => {
                        let text = answer(&mut h).await;
                        let _ = h.delivered.send(());
                        Ok(text)
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "it waits for the turn before it");
        let _ = first.delivered.send(());
        assert!(
            waiting.await.unwrap().is_ok(),
            "the fork found the stored response"
        );

        // Not delivered: the reserved response is gone, and a fork waiting on it is told so.
        let mut lost = service
            .start(stored(vec![ChatMessage::user("c")], "resp_lost"))
            .await
            .unwrap();
        answer(&mut lost).await;
        let fork = TurnInput {
            fork_from: Some("resp_lost".into()),
            ..input(vec![ChatMessage::user("d")])
        };
        let waiting = tokio::spawn({
            let service = service.clone();
            async move { service.start(fork).await.map(|h| h.conversation_id) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(lost);
        let err = waiting.await.unwrap().unwrap_err();
        assert_eq!(err.code, "previous_response_not_found", "{err}");
    }

    /// A delivered turn of `client`: the conversation id it got and how many tasks its
    /// conversation had closed before it.
    async fn delivered_turn(
        service: &Arc<Conversations>,
        client: &str,
        turn: TurnInput,
    ) -> Result<(String, usize), TurnError> {
        let mut h = service
            .start(TurnInput {
                client: client.into(),
                ..turn
            })
            .await?;
        let mut completed = None;
        while let Some(ev) = h.events.recv().await {
            match ev {
                TurnEvent::Routed(r) => completed = Some(r.completed_tasks),
                TurnEvent::Done(_) => break,
                TurnEvent::Error(e) => return Err(e),
                _ => {}
            }
        }
        let _ = h.delivered.send(());
        // The commit runs in the turn's task.
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok((h.conversation_id, completed.expect("routed")))
    }

    /// Red-team finding 21: a named id was echoed when free and replaced when another client
    /// held it, which told that client it existed. Each client has ids of its own now: B naming
    /// A's id gets it back with a fresh conversation, A goes on in its own, and A's stored
    /// response is to B what an id that never existed is.
    #[tokio::test]
    async fn two_clients_naming_one_id_hold_a_conversation_each() {
        let service = l2_service();
        let named = |messages| TurnInput {
            conversation: Some("shared-conversation-0001".into()),
            ..input(messages)
        };
        let a1 = delivered_turn(&service, "a", named(vec![ChatMessage::user("a1")])).await;
        assert_eq!(a1.unwrap(), ("shared-conversation-0001".into(), 0));
        let b1 = delivered_turn(&service, "b", named(vec![ChatMessage::user("b1")])).await;
        assert_eq!(
            b1.unwrap(),
            ("shared-conversation-0001".into(), 0),
            "echoed as if free, and fresh"
        );
        for client in ["a", "b"] {
            let next = named(vec![
                ChatMessage::user(format!("{client}1")),
                ChatMessage::assistant("L2"),
                ChatMessage::user(format!("{client}2")),
            ]);
            let (id, completed) = delivered_turn(&service, client, next).await.unwrap();
            assert_eq!(id, "shared-conversation-0001");
            assert_eq!(completed, 1, "{client} continued its own conversation");
        }
        assert_eq!(service.len(), 2);

        let stored = TurnInput {
            snapshot_as: Some("resp_of_a".into()),
            ..input(vec![ChatMessage::user("kept")])
        };
        delivered_turn(&service, "a", stored).await.unwrap();
        let fork = |parent: &str| TurnInput {
            fork_from: Some(parent.into()),
            ..input(vec![ChatMessage::user("more")])
        };
        let theirs = delivered_turn(&service, "b", fork("resp_of_a"))
            .await
            .unwrap_err();
        let none = delivered_turn(&service, "b", fork("resp_of_nobody"))
            .await
            .unwrap_err();
        assert_eq!(theirs.code, "previous_response_not_found");
        assert_eq!(
            (theirs.kind, theirs.message.replace("resp_of_a", "ID")),
            (none.kind, none.message.replace("resp_of_nobody", "ID"))
        );
        assert!(
            delivered_turn(&service, "a", fork("resp_of_a"))
                .await
                .is_ok()
        );
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
}
