//! The agent core: sessions of turns, the turn loop (stream → tool calls → results), approvals.
pub mod instructions;
