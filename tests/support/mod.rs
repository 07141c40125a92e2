//! Helpers shared by the integration-test modules: the mock OpenAI-compatible engine, a clean
//! environment for the real binary, the tiny-qwen3 golden fixture, and the folder that plays
//! "outside the workspace".

pub mod env;
pub mod external;
pub mod golden;
pub mod mock_engine;
pub mod outside;

pub use mock_engine::{MockEngine, MockReply, RecordedRequest, Script, sequence};
