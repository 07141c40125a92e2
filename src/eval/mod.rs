//! `baton eval`: runs Terminal-Bench / Harbor format tasks and scores them.
//!
//! A job loads task folders ([`task`]), runs each trial in a fresh sandbox ([`isolation`],
//! [`trial`]; the agent and verifier share one, as in one container: [`container`]; the agent's
//! model key stays outside, in [`gateway`]), or in a real container of the task's image under
//! Podman or Docker ([`runtime`]), with a bounded worker pool ([`job`]), reads the verifier's
//! reward ([`reward`]),
//! turns baton's event stream into figures and an ATIF trajectory ([`events`], [`atif`]) and
//! prints a summary ([`report`]). Errors are typed values ([`error`]). See docs/eval.md.

pub(crate) mod atif;
pub(crate) mod container;
pub(crate) mod dockerfile;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod fsutil;
pub(crate) mod gateway;
pub mod isolation;
pub mod job;
mod overlay;
pub(crate) mod process;
pub(crate) mod progress;
pub mod report;
pub(crate) mod reward;
pub(crate) mod runtime;
pub mod task;
pub mod trial;
pub(crate) mod yaml_lite;
