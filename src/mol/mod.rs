//! The Mixture-of-LoRA loop: profiles, the route hop, the timeline of tasks and each expert's
//! view, the answer request, and summaries.
//!
//! What the agent core uses:
//! - [`decide()`]: who answers a user turn or a tool-result continuation, and how that was
//!   decided (fixed outside `mol` mode, sticky, pinned, routed, fallback) — the one place;
//!   [`modes`] says what else a mode runs (summaries, view fitting, the system head).
//! - [`Profile::load`] / [`Profile::builtin`]: the four profile texts, validated; `adapter(expert)`
//!   gives the engine model name, `intro` the identity prompt.
//! - [`route`]: runs the route hop and never fails (the fallback: open task's expert, else L2);
//!   [`route_request`] builds the exact wire request.
//! - [`Timeline`]: `open`, `push`, `close`, `record_summary`, `view(expert, head)`,
//!   `summaries_needed_by(expert)` (what a turn must wait for), `pending_summaries()`.
//! - [`with_identity`]: the system head with the identity prompt.
//! - [`answer_hop_request`]: a turn's answer request for the mode (adapter and view, or model
//!   name and full history); [`answer_request`] the options and the reasoning mapping.
//! - [`summarize`] / [`summary_request`]: the summary hop, never fails (empty on error);
//!   [`answer_as_summary`]: the short L0 answer that is its own summary (no hop).
//! - [`SessionState`]: what a session's records rebuild; `apply` is the one fold, used live
//!   (`commit`) and on resume ([`resume_session`]).
//! - [`Conversations`]: the loop as a server runs it (`baton serve`, behind
//!   `protocol::MolService`): conversations held in memory, one turn per client request,
//!   committed only once the answer was delivered; with [`persist`] (`--state-dir`) kept on
//!   disk across restarts.
//! - [`Speculation`]: the speculative answer — [`speculative_expert`] says who a turn bets
//!   on, `Speculation::start` sends that expert's answer with the route hop, and
//!   `resolve` keeps it (a hit) or cancels it once the route has decided.
//! - [`ContextBudget`] / [`TokenEstimator`]: the context budget; `Timeline::shrink_old_tool_outputs`
//!   and `Timeline::compact` with [`fitted_compaction_request`] keep long tasks within the window.

pub mod answer;
pub(crate) mod budget;
pub(crate) mod compact;
pub mod conversations;
pub(crate) mod decide;
#[cfg(test)]
mod fake_backend;
pub mod follow_up;
pub mod handoff;
pub mod ledger;
pub(crate) mod modes;
pub mod persist;
pub mod profile;
pub mod route;
pub mod speculate;
pub(crate) mod state;
pub mod summary;
pub mod timeline;

pub use answer::{
    AnswerInput, AnswerOptions, ReasoningWire, answer_hop_request, answer_request, apply_reasoning,
    view_request,
};
pub use budget::{ContextBudget, TokenEstimator, prompt_chars};
pub use compact::{
    HANDOFF_PROMPT, compaction_request, files_touched, fitted_compaction_request, keep_from_for,
    latest_plan, shrink_output,
};
pub use conversations::{ConversationService, Conversations, StoreLimits};
pub use decide::{ExpertChoice, RouteHop, Step, decide};
pub use follow_up::follow_up_expert;
pub use handoff::{HANDOFF_TOOL, handed_over, handoff_spec, parse_handoff};
pub use ledger::ledger;
pub use profile::{ExpertDef, Profile, ProfileError, ProfileNames, ROUTE_PREFILL};
pub use route::{
    DEFAULT_EXPERT, ROUTE_TEXT_CHARS, ROUTER_MAX_TOKENS, RouteOutcome, fallback_expert, label_text,
    parse_label, route, route_excerpt, route_request,
};
pub use speculate::{Resolved, Speculation, speculative_expert, view_is_ready};
pub use state::{SessionState, restore, resume_session};
pub use summary::{
    ANSWER_AS_SUMMARY_CHARS, SUMMARY_MAX_TOKENS, SummaryOutcome, answer_as_summary, summarize,
    summary_request, summary_request_extending, summary_request_for, summary_text,
};
pub use timeline::{
    Compaction, SummaryState, Task, Timeline, handover_message, summary_message, with_identity,
};
