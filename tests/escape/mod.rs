//! The escape suite: every attack the "Trust" review found, as an executable test named after
//! it. Read it as the threat model of docs/sandbox.md: each test plays a hostile model or
//! command and asserts that the user's files, terminal, host and secrets are left alone.

mod approval;
mod file_tools;
mod git;
mod helper;
mod hidden;
mod host;
mod policy;
mod review;
mod spawn;
mod terminal;
mod trials;
mod undo;
mod untrusted_fs;
