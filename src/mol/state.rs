//! A session's state and the one fold that makes it: every change is a `Record`, applied by
//! `SessionState::apply` — by the live agent as it goes (`commit`: apply and append in one
//! call) and by resume, over the records of the file. The two cannot drift apart.

use std::path::Path;

use crate::mol::Timeline;
use crate::protocol::UsageTotals;
use crate::session::{Record, SessionError, SessionFile};

/// Everything a session's records rebuild.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionState {
    pub id: String,
    /// The mode the session was created in (`mol`, `proxy`, `single`).
    pub mode: String,
    pub workspace: String,
    pub timeline: Timeline,
    /// The id the next turn gets.
    pub next_turn_id: u64,
    /// `proxy` mode: the conversation id the server gave.
    pub conversation_id: Option<String>,
    /// Text of the last answer (shown when resuming interactively).
    pub last_answer: Option<String>,
    /// Tokens of every hop of the session, resumed runs included.
    pub usage: UsageTotals,
    /// The last turn begun, whose hops `turn_usage` counts.
    pub turn_id: u64,
    pub turn_usage: UsageTotals,
    /// The name given with `/rename` (listings show it before the first message).
    pub name: Option<String>,
    /// Which turn undo reverts next, which undo redo reverts.
    pub undo: crate::session::UndoLog,
}

impl Default for SessionState {
    fn default() -> Self {
        SessionState {
            id: String::new(),
            mode: String::new(),
            workspace: String::new(),
            timeline: Timeline::new(),
            next_turn_id: 1,
            conversation_id: None,
            last_answer: None,
            usage: UsageTotals::default(),
            turn_id: 0,
            turn_usage: UsageTotals::default(),
            name: None,
            undo: crate::session::UndoLog::default(),
        }
    }
}

impl SessionState {
    /// The state `records` fold to, from an empty session.
    pub fn from_records<'a>(records: impl IntoIterator<Item = &'a Record>) -> SessionState {
        let mut state = SessionState::default();
        for record in records {
            state.apply(record);
        }
        state
    }

    /// The state of a file just created: its header alone.
    pub fn of_new_file(file: &SessionFile) -> SessionState {
        SessionState::from_records([file.header()])
    }

    /// Applies one record. Returns whether the state changed (a `Route` record, say, changes
    /// nothing the session needs to continue).
    pub fn apply(&mut self, record: &Record) -> bool {
        match record {
            Record::Meta {
                id,
                mode,
                workspace,
                ..
            } => {
                self.id = id.clone();
                self.mode = mode.clone();
                self.workspace = workspace.clone();
                true
            }
            Record::Checkpoint { .. } | Record::Undone { .. } | Record::Redone { .. } => {
                self.undo.apply(record)
            }
            Record::Turn { turn_id, .. } => {
                self.undo.apply(record);
                self.next_turn_id = self.next_turn_id.max(turn_id + 1);
                self.turn_id = *turn_id;
                self.turn_usage = UsageTotals::default();
                true
            }
            Record::Route { .. } => false,
            Record::Renamed { name } => {
                let name = Some(name.trim().to_string()).filter(|n| !n.is_empty());
                let changed = self.name != name;
                self.name = name;
                changed
            }
            Record::ConversationId { id } => {
                let changed = self.conversation_id.as_ref() != Some(id);
                self.conversation_id = Some(id.clone());
                changed
            }
            Record::Usage {
                turn_id,
                hop,
                usage,
            } => {
                self.usage.add(*hop, usage);
                if *turn_id == self.turn_id {
                    self.turn_usage.add(*hop, usage);
                }
                !usage.is_zero()
            }
            Record::TurnEnded { answer, .. } => {
                let changed = answer.is_some();
                if answer.is_some() {
                    self.last_answer = answer.clone();
                }
                changed
            }
            other => self.timeline.apply(other, self.mode == "mol"),
        }
    }

    /// Applies `record` and appends it to `file`, in one call: what the live session does for
    /// every change. The state changes even when the write fails (the session goes on; the
    /// caller reports the error).
    pub fn commit(&mut self, file: &mut SessionFile, record: Record) -> Result<(), SessionError> {
        self.apply(&record);
        file.append(&record)
    }

    /// Like `commit`, but writes the record only when applying it changed the state (a shrink
    /// or a compaction that had nothing to do). Returns whether it did.
    pub fn commit_change(
        &mut self,
        file: &mut SessionFile,
        record: Record,
    ) -> Result<bool, SessionError> {
        if !self.apply(&record) {
            return Ok(false);
        }
        file.append(&record).map(|_| true)
    }

    /// The conversation id a `proxy` request sends: the server's, else one made from the
    /// session id.
    pub fn conversation_id_or_default(&self) -> String {
        self.conversation_id
            .clone()
            .unwrap_or_else(|| format!("baton-{}", self.id.replace('-', "")))
    }
}

/// Opens a saved session (`id`, a unique prefix, or `last`) and rebuilds its state. A task a
/// crash left open can never be continued (its tool results are lost): it is abandoned, and
/// that is recorded like any other change.
pub fn resume_session(
    dir: &Path,
    id: &str,
    workspace: Option<&Path>,
) -> Result<(SessionFile, SessionState), SessionError> {
    let (file, records) = SessionFile::resume(dir, id, workspace)?;
    restore(file, &records)
}

/// The state of an opened file's records, with an open task abandoned (see `resume_session`).
pub fn restore(
    mut file: SessionFile,
    records: &[Record],
) -> Result<(SessionFile, SessionState), SessionError> {
    let mut state = SessionState::from_records(records);
    if let Some(task_id) = state.timeline.open_task().map(|t| t.id) {
        let note = Some("Interrupted: the session ended before this request was finished.".into());
        state.commit(&mut file, Record::TaskAbandoned { task_id, note })?;
    }
    Ok((file, state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mol::SummaryState;
    use crate::protocol::{ChatMessage, Expert, Hop, Role, TokenUsage};

    /// A session file as baton wrote it before records and state had one writer (no `usage`
    /// records): two turns, a tool call, a summary, a fold, a learned ratio, a proxy id, and a
    /// second task cut off by a crash with a tool call left unanswered.
    const TODAYS_FORMAT: &str = r#"{"record":"meta","id":"0193aaaa-0000-7000-8000-000000000001","created":"2025-01-01T00:00:00+00:00","mode":"mol","backend":"http://127.0.0.1:8000/v1","workspace":"/src/app","version":"0.1.0"}
{"record":"turn","turn_id":1,"text":"why does the build fail?","at":"2025-01-01T00:00:01+00:00"}
{"record":"route","turn_id":1,"expert":"L2","decision":"model","latency_ms":12}
{"record":"task_opened","task_id":1,"owner":"L2","user_text":"why does the build fail?"}
{"record":"message","task_id":1,"message":{"role":"assistant","content":"","tool_calls":[{"id":"c1","name":"read_file","arguments":"{\"path\":\"build.rs\"}"}]}}
{"record":"message","task_id":1,"message":{"role":"tool","content":"fn main() {}","tool_call_id":"c1"}}
{"record":"token_ratio","chars_per_token":3.5}
{"record":"message","task_id":1,"message":{"role":"assistant","content":"The build script is empty."}}
{"record":"task_closed","task_id":1}
{"record":"turn_ended","turn_id":1,"status":"done","answer":"The build script is empty."}
{"record":"summary","task_id":1,"expert":"L2","text":"Found an empty build.rs."}
{"record":"conversation_id","id":"conv-7"}
{"record":"turn","turn_id":2,"text":"book a table","at":"2025-01-01T00:01:00+00:00"}
{"record":"route","turn_id":2,"expert":"L1","decision":"fallback","reason":"garbage label","latency_ms":30}
{"record":"task_opened","task_id":2,"owner":"L1","user_text":"book a table"}
{"record":"tasks_folded","expert":"L1","before_task":2}
{"record":"message","task_id":2,"message":{"role":"assistant","content":"","tool_calls":[{"id":"c2","name":"list_dir","arguments":"{}"}]}}
"#;

    #[test]
    fn a_session_file_in_todays_format_resumes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir
            .path()
            .join("0193aaaa-0000-7000-8000-000000000001.jsonl");
        std::fs::write(&path, TODAYS_FORMAT).expect("write");
        let (file, state) =
            resume_session(dir.path(), "0193aaaa", Some(Path::new("/src/app"))).expect("resume");
        assert_eq!(file.id, "0193aaaa-0000-7000-8000-000000000001");
        assert_eq!(state.id, file.id);
        assert_eq!(state.mode, "mol");
        assert_eq!(state.workspace, "/src/app");
        assert_eq!(state.next_turn_id, 3);
        assert_eq!(state.conversation_id.as_deref(), Some("conv-7"));
        assert_eq!(
            state.last_answer.as_deref(),
            Some("The build script is empty.")
        );
        assert_eq!(state.usage, UsageTotals::default(), "no usage records yet");
        let t = &state.timeline;
        assert_eq!(t.token_ratio, Some(3.5));
        assert_eq!(t.folded_before.get(&Expert::L1), Some(&2));
        assert_eq!(t.tasks.len(), 2);
        assert_eq!(
            t.tasks[0].summary,
            SummaryState::Recorded {
                text: "Found an empty build.rs.".into()
            }
        );
        assert_eq!(t.tasks[0].messages.len(), 3);
        // The task the crash left open is abandoned, its dangling call answered and the
        // model told why it ended...
        assert!(t.tasks[1].closed);
        assert_eq!(t.tasks[1].summary, SummaryState::Skipped);
        let [.., result, note] = t.tasks[1].messages.as_slice() else {
            panic!("messages: {:?}", t.tasks[1].messages)
        };
        assert_eq!(result.role, Role::Tool);
        assert_eq!(result.tool_call_id.as_deref(), Some("c2"));
        assert_eq!(note.role, Role::Assistant);
        assert!(note.content.contains("the session ended"));
        // ...and that is recorded, so the file replays to exactly this state.
        drop(file);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.ends_with(
            "{\"record\":\"task_abandoned\",\"task_id\":2,\"note\":\"Interrupted: the session \
             ended before this request was finished.\"}\n"
        ));
        let (_file, records) = SessionFile::open(&path).expect("open");
        assert_eq!(SessionState::from_records(&records), state);
        // L1's view shows L2's task through its summary.
        let view = t.view(Expert::L1, &[]);
        assert!(view[1].content.contains("Found an empty build.rs."));
    }

    #[test]
    fn usage_records_count_into_the_turn_and_the_session() {
        let usage = |p, c| TokenUsage {
            prompt_tokens: p,
            completion_tokens: c,
            cached_tokens: None,
            estimated: false,
        };
        let records = [
            Record::Turn {
                turn_id: 1,
                text: "a".into(),
                at: String::new(),
            },
            Record::Usage {
                turn_id: 1,
                hop: Hop::Route,
                usage: usage(10, 1),
            },
            Record::Usage {
                turn_id: 1,
                hop: Hop::Answer,
                usage: usage(100, 20),
            },
            Record::Turn {
                turn_id: 2,
                text: "b".into(),
                at: String::new(),
            },
            // Turn 1's summary, finished while turn 2 runs: the session's, not turn 2's.
            Record::Usage {
                turn_id: 1,
                hop: Hop::Summary,
                usage: usage(50, 5),
            },
            Record::Usage {
                turn_id: 2,
                hop: Hop::Answer,
                usage: usage(7, 3),
            },
        ];
        let s = SessionState::from_records(&records);
        assert_eq!(s.usage.total, usage(167, 29));
        assert_eq!(s.usage.summary, usage(50, 5));
        assert_eq!(s.usage.answer, usage(107, 23));
        assert_eq!(s.turn_id, 2);
        assert_eq!(s.turn_usage.total, usage(7, 3));
        assert_eq!(s.turn_usage.summary, TokenUsage::default());
    }

    #[test]
    fn abandoning_a_task_answers_its_dangling_tool_calls() {
        let mut t = Timeline::new();
        t.open(Expert::L2, "go");
        let mut call = ChatMessage::assistant("");
        for id in ["a", "b"] {
            call.tool_calls.push(crate::protocol::ToolCall {
                id: id.into(),
                name: "list_dir".into(),
                arguments: "{}".into(),
            });
        }
        t.push(call);
        t.push(ChatMessage::tool_result("a", "done"));
        assert_eq!(t.abandon_open_task(None), Some(1));
        let msgs = &t.tasks[0].messages;
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[2].tool_call_id.as_deref(), Some("b"));
        assert_eq!(t.abandon_open_task(None), None);
    }

    #[test]
    fn a_rename_is_a_record_the_latest_name_wins_and_empty_clears() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
        let mut state = SessionState::of_new_file(&file);
        let rename = |name: &str| Record::Renamed { name: name.into() };
        state.commit(&mut file, rename("draft")).expect("write");
        state
            .commit(&mut file, rename(" parser fix "))
            .expect("write");
        assert_eq!(state.name.as_deref(), Some("parser fix"));
        let path = file.path.clone();
        drop(file);
        let (_file, records) = SessionFile::open(&path).expect("open");
        assert_eq!(SessionState::from_records(&records), state);
        assert!(
            SessionState::from_records(&[rename("a"), rename("")])
                .name
                .is_none()
        );
    }

    #[test]
    fn commit_change_writes_only_what_changed_the_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
        let mut state = SessionState::of_new_file(&file);
        let ratio = Record::TokenRatio {
            chars_per_token: 3.0,
        };
        assert!(
            state
                .commit_change(&mut file, ratio.clone())
                .expect("write")
        );
        assert!(!state.commit_change(&mut file, ratio).expect("write"));
        // Nothing to compact: no task.
        let compact = Record::Compacted {
            task_id: 1,
            summary: "s".into(),
            keep_steps: 2,
        };
        assert!(!state.commit_change(&mut file, compact).expect("write"));
        let path = file.path.clone();
        drop(file);
        let (_file, records) = SessionFile::open(&path).expect("open");
        assert_eq!(records.len(), 2, "meta and one ratio: {records:?}");
        assert_eq!(SessionState::from_records(&records), state);
    }
}
