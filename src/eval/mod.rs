//! `baton eval`: runs Terminal-Bench / Harbor format tasks and scores them.
//!
//! A job loads task folders ([`task`]), runs each trial in a fresh sandbox ([`isolation`],
//! [`trial`]) with a bounded worker pool ([`job`]), reads the verifier's reward ([`reward`]),
//! turns baton's event stream into figures and an ATIF trajectory ([`events`], [`atif`]) and
//! prints a summary ([`report`]). Errors are typed values ([`error`]). See docs/eval.md.

pub mod atif;
pub mod dockerfile;
pub mod error;
pub mod events;
pub mod fsutil;
pub mod isolation;
pub mod job;
pub mod process;
pub mod progress;
pub mod report;
pub mod reward;
pub mod task;
pub mod trial;
pub mod yaml_lite;
