//! Shared helpers for integration tests: the mock OpenAI-compatible engine.
#![allow(dead_code, unused_imports)]

pub mod mock_engine;

pub use mock_engine::{MockEngine, MockReply, RecordedRequest, Script, sequence};
