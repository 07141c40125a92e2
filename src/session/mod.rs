//! Persistent sessions: one JSONL file per session, appended as it goes, and resume.
