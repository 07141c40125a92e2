//! After `/resume` (or `--resume`), the earlier conversation is shown again: the user turns and
//! final answers of the session's records (read by the session module), so a resumed session is
//! not a blank screen.

use std::path::Path;

use crate::protocol::Expert;
use crate::session::Record;

/// One exchange of a saved session.
#[derive(Debug, Clone, PartialEq)]
pub struct PastTurn {
    pub user: String,
    pub expert: Option<Expert>,
    pub answer: Option<String>,
}

/// At most this many earlier turns are shown (the newest ones).
const MAX_TURNS: usize = 200;

/// The turns of a session file. Lines that do not parse are skipped: a file cut off by a crash
/// still shows what it holds.
pub fn past_turns(path: &Path) -> Result<Vec<PastTurn>, String> {
    let records = crate::session::read_records(path).map_err(|e| e.to_string())?;
    let mut turns: Vec<PastTurn> = Vec::new();
    for record in records {
        match record {
            Record::Turn { text, .. } => turns.push(PastTurn {
                user: text,
                expert: None,
                answer: None,
            }),
            Record::Route { expert, .. } => {
                if let Some(t) = turns.last_mut() {
                    t.expert = Some(expert);
                }
            }
            Record::TurnEnded { answer, .. } => {
                if let Some(t) = turns.last_mut() {
                    t.answer = answer.filter(|a| !a.trim().is_empty());
                }
            }
            _ => {}
        }
    }
    let skip = turns.len().saturating_sub(MAX_TURNS);
    Ok(turns.split_off(skip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{RouteDecision, TurnStatus};

    #[test]
    fn reads_turns_routes_and_answers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.jsonl");
        let records = [
            Record::Turn {
                turn_id: 1,
                text: "hi".into(),
                at: "t".into(),
            },
            Record::Route {
                turn_id: 1,
                expert: Expert::L0,
                decision: RouteDecision::Model,
                reason: None,
                latency_ms: 5,
            },
            Record::TurnEnded {
                turn_id: 1,
                status: TurnStatus::Done,
                answer: Some("hello!".into()),
            },
            Record::Turn {
                turn_id: 2,
                text: "unfinished".into(),
                at: "t".into(),
            },
        ];
        let mut text: String = records
            .iter()
            .map(|r| serde_json::to_string(r).expect("json") + "\n")
            .collect();
        text.push_str("{\"record\": \"cut off");
        std::fs::write(&path, text).expect("write");
        let turns = past_turns(&path).expect("read");
        assert_eq!(turns.len(), 2);
        assert_eq!(
            turns[0],
            PastTurn {
                user: "hi".into(),
                expert: Some(Expert::L0),
                answer: Some("hello!".into())
            }
        );
        assert_eq!(turns[1].answer, None);
        assert!(past_turns(&dir.path().join("missing.jsonl")).is_err());
    }
}
