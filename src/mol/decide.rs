//! Which expert answers, decided in one place: fixed outside `mol` mode, sticky when tool
//! results continue a loop, pinned by the user, routed by L0 — or, when the route hop fails or
//! returns garbage, the fallback (the open task's expert, else the profile's default), with why.
//!
//! A route hop that could not reach the server at all is no reason to fall back: the answer
//! hop would go to the same dead server, so the decision fails with that error instead.
//!
//! The agent asks once per model call and turns the answer into events; nothing here emits or
//! records anything.

use std::time::Duration;

use crate::backend::{BackendError, ChatBackend};
use crate::mol::profile::Profile;
use crate::mol::route::{DEFAULT_EXPERT, route};
use crate::protocol::{ErrorKind, Expert, Mode, RouteDecision, TokenUsage};

/// The moment an expert must be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// A new user turn. `open_owner` owns the task an interrupted turn left open: the expert
    /// a failed route falls back to. `follow_up`: the expert a short follow-up stays with
    /// (`mol::follow_up_expert`), which then answers without a route hop.
    UserTurn {
        text: &'a str,
        open_owner: Option<Expert>,
        follow_up: Option<Expert>,
    },
    /// Tool results go back to the model: they continue on `issuer`, the expert that made the
    /// calls, because only its view holds them.
    ToolResults { issuer: Expert },
}

/// The route hop of a decision, when one was sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouteHop {
    pub latency: Duration,
    pub usage: TokenUsage,
}

/// Who answers, and how that was decided.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertChoice {
    /// Outside `mol` mode a fixed internal label, so the whole history is one expert's view.
    pub expert: Expert,
    pub decision: RouteDecision,
    /// Why the fallback chose (the route hop's error, or the label it gave); `None` for every
    /// other decision — the raw label of a model decision is noise.
    pub reason: Option<String>,
    pub route_hop: Option<RouteHop>,
}

impl ExpertChoice {
    fn without_hop(expert: Expert, decision: RouteDecision) -> Self {
        ExpertChoice {
            expert,
            decision,
            reason: None,
            route_hop: None,
        }
    }

    /// How long the decision took: the route hop's latency, zero when none was sent.
    pub fn latency(&self) -> Duration {
        self.route_hop.map_or(Duration::ZERO, |h| h.latency)
    }

    /// Whether a frontend hears of this choice: where the server routes by itself (or there is
    /// nothing to route) baton chose nothing worth showing.
    pub fn is_announced(&self) -> bool {
        self.decision != RouteDecision::None
    }
}

/// Decides who answers `step`. Runs the route hop only for a new user turn in `mol` mode with
/// no pinned expert; `before_route_hop` is called just before that hop is sent (the agent
/// announces the hop there). A failed or unparseable route falls back; only a route hop that
/// found the server unreachable (`ErrorKind::Unreachable`) fails, with that hop's error.
pub async fn decide(
    backend: &dyn ChatBackend,
    profile: &Profile,
    mode: Mode,
    pinned: Option<Expert>,
    step: Step<'_>,
    before_route_hop: impl FnOnce(),
) -> Result<ExpertChoice, BackendError> {
    if !mode.routes_client_side() {
        return Ok(ExpertChoice::without_hop(
            DEFAULT_EXPERT,
            RouteDecision::None,
        ));
    }
    let (text, open_owner, follow_up) = match step {
        Step::ToolResults { issuer } => {
            return Ok(ExpertChoice::without_hop(issuer, RouteDecision::Sticky));
        }
        Step::UserTurn {
            text,
            open_owner,
            follow_up,
        } => (text, open_owner, follow_up),
    };
    if let Some(expert) = pinned {
        return Ok(ExpertChoice::without_hop(expert, RouteDecision::Pinned));
    }
    if let Some(expert) = follow_up {
        return Ok(ExpertChoice::without_hop(expert, RouteDecision::FollowUp));
    }
    before_route_hop();
    let outcome = route(backend, profile, text, open_owner).await;
    if let Some(error) = outcome.error
        && error.kind() == ErrorKind::Unreachable
    {
        return Err(error);
    }
    let reason = (outcome.decision == RouteDecision::Fallback)
        .then_some(outcome.reason)
        .flatten();
    Ok(ExpertChoice {
        expert: outcome.expert,
        decision: outcome.decision,
        reason,
        route_hop: Some(RouteHop {
            latency: outcome.latency,
            usage: outcome.usage,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mol::fake_backend::Router;
    use crate::mol::profile::ProfileNames;
    use crate::protocol::Hop;

    fn profile() -> Profile {
        Profile::builtin(&ProfileNames::default())
    }

    fn user_turn(open_owner: Option<Expert>) -> Step<'static> {
        Step::UserTurn {
            text: "fix the build",
            open_owner,
            follow_up: None,
        }
    }

    #[tokio::test]
    async fn a_follow_up_stays_with_its_expert_without_a_route_hop() {
        let backend = Router::answering("L0");
        let step = Step::UserTurn {
            text: "do the same for February",
            open_owner: None,
            follow_up: Some(Expert::L1),
        };
        let (choice, announced) = decide_counting(&backend, Mode::Mol, None, step).await;
        assert_eq!(choice.expert, Expert::L1);
        assert_eq!(choice.decision, RouteDecision::FollowUp);
        assert!(choice.route_hop.is_none());
        assert_eq!(announced, 0, "no route hop");
        assert!(choice.is_announced());
        // A pinned expert still wins.
        let (pinned, _) = decide_counting(&backend, Mode::Mol, Some(Expert::L3), step).await;
        assert_eq!(pinned.expert, Expert::L3);
    }

    /// Decides and counts how often the hook before the route hop ran.
    async fn decide_counting(
        backend: &Router,
        mode: Mode,
        pinned: Option<Expert>,
        step: Step<'_>,
    ) -> (ExpertChoice, u32) {
        let mut announced = 0;
        let choice = decide(backend, &profile(), mode, pinned, step, || announced += 1)
            .await
            .expect("only an unreachable server fails a decision");
        (choice, announced)
    }

    #[tokio::test]
    async fn a_user_turn_is_routed_by_l0() {
        let backend = Router::answering(" L1 ");
        let (choice, announced) = decide_counting(&backend, Mode::Mol, None, user_turn(None)).await;
        assert_eq!(
            (choice.expert, choice.decision),
            (Expert::L1, RouteDecision::Model)
        );
        assert_eq!(choice.reason, None, "a model decision carries no reason");
        assert_eq!(choice.route_hop.map(|h| h.usage.prompt_tokens), Some(40));
        assert_eq!((backend.route_requests(), announced), (1, 1));
        assert!(choice.is_announced());
    }

    #[tokio::test]
    async fn pinned_beats_routing() {
        let backend = Router::answering("L1");
        let (choice, announced) = decide_counting(
            &backend,
            Mode::Mol,
            Some(Expert::L3),
            user_turn(Some(Expert::L1)),
        )
        .await;
        assert_eq!(
            choice,
            ExpertChoice::without_hop(Expert::L3, RouteDecision::Pinned)
        );
        assert_eq!((backend.route_requests(), announced), (0, 0));
        assert_eq!(choice.latency(), Duration::ZERO);
    }

    #[tokio::test]
    async fn proxy_and_single_never_route() {
        for mode in [Mode::Proxy, Mode::Single] {
            for pinned in [None, Some(Expert::L3)] {
                for step in [
                    user_turn(Some(Expert::L1)),
                    Step::ToolResults { issuer: Expert::L1 },
                ] {
                    let backend = Router::answering("L1");
                    let (choice, announced) = decide_counting(&backend, mode, pinned, step).await;
                    assert_eq!(
                        choice,
                        ExpertChoice::without_hop(Expert::L2, RouteDecision::None),
                        "{mode:?} {pinned:?} {step:?}"
                    );
                    assert!(!choice.is_announced());
                    assert_eq!((backend.requests(), announced), (0, 0));
                }
            }
        }
    }

    #[tokio::test]
    async fn tool_results_stay_on_the_issuing_expert_without_a_route_hop() {
        for pinned in [None, Some(Expert::L3)] {
            let backend = Router::answering("L0");
            let step = Step::ToolResults { issuer: Expert::L1 };
            let (choice, announced) = decide_counting(&backend, Mode::Mol, pinned, step).await;
            assert_eq!(
                choice,
                ExpertChoice::without_hop(Expert::L1, RouteDecision::Sticky),
                "pinned {pinned:?}"
            );
            assert!(choice.is_announced());
            assert_eq!((backend.route_requests(), announced), (0, 0));
        }
    }

    #[tokio::test]
    async fn a_failed_route_falls_back_to_the_open_task_else_l2_and_says_why() {
        let backend = Router::failing("engine down");
        let (open, _) =
            decide_counting(&backend, Mode::Mol, None, user_turn(Some(Expert::L1))).await;
        let (fresh, _) = decide_counting(&backend, Mode::Mol, None, user_turn(None)).await;
        assert_eq!(backend.route_requests(), 2);
        for (choice, expected) in [(open, Expert::L1), (fresh, Expert::L2)] {
            assert_eq!(
                (choice.expert, choice.decision),
                (expected, RouteDecision::Fallback)
            );
            let reason = choice.reason.expect("a fallback says why");
            assert!(
                reason.contains("route hop") && reason.contains("engine down"),
                "{reason}"
            );
            assert!(choice.route_hop.is_some(), "the failed hop was still sent");
        }
    }

    #[tokio::test]
    async fn a_garbage_label_falls_back_to_the_open_task_else_l2_and_says_why() {
        let backend = Router::answering("banana");
        let (open, _) =
            decide_counting(&backend, Mode::Mol, None, user_turn(Some(Expert::L3))).await;
        let (fresh, _) = decide_counting(&backend, Mode::Mol, None, user_turn(None)).await;
        for (choice, expected) in [(open, Expert::L3), (fresh, Expert::L2)] {
            assert_eq!(
                (choice.expert, choice.decision),
                (expected, RouteDecision::Fallback)
            );
            assert!(choice.reason.is_some_and(|r| r.contains("banana")));
            assert_eq!(choice.route_hop.map(|h| h.usage.completion_tokens), Some(2));
        }
    }

    #[tokio::test]
    async fn an_unreachable_route_fails_instead_of_falling_back() {
        let backend = Router::refusing();
        let mut announced = 0;
        let step = user_turn(Some(Expert::L1));
        let result = decide(&backend, &profile(), Mode::Mol, None, step, || {
            announced += 1
        })
        .await;
        let error = result.expect_err("no fallback to the same dead server");
        assert_eq!(error.kind(), ErrorKind::Unreachable);
        assert_eq!(error.hop(), Hop::Route);
        assert_eq!((backend.route_requests(), announced), (1, 1));
    }
}
