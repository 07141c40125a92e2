//! Helpers shared by the integration-test modules: the mock OpenAI-compatible engine, the
//! tiny-qwen3 golden fixture, and the folder that plays "outside the workspace".

pub mod golden;
pub mod mock_engine;
pub mod outside;

pub use mock_engine::{MockEngine, MockReply, RecordedRequest, Script, sequence};
