//! `baton eval`: runs Terminal-Bench / Harbor format tasks and scores them.
