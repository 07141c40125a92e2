//! The session's undo history, folded from its `Checkpoint`/`Undone`/`Redone` records: which
//! turn undo reverts next and which undo redo reverts. The ids come only from the session file
//! (outside the workspace), never from anything a command could write.

use super::Record;

/// One turn that changed files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnSnapshots {
    pub turn_id: u64,
    pub before: String,
    pub after: String,
    pub undone: bool,
    /// The repository's HEAD moved during the turn.
    pub head: Option<super::HeadMove>,
}

/// An undo that redo can revert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoneChange {
    pub turn_id: u64,
    pub before: String,
    pub after: String,
}

/// The undo history of one session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UndoLog {
    pub turns: Vec<TurnSnapshots>,
    /// Undos since the last turn that changed files, newest last.
    pub redoable: Vec<UndoneChange>,
}

impl UndoLog {
    /// The log `records` fold to.
    pub fn of<'a>(records: impl IntoIterator<Item = &'a Record>) -> UndoLog {
        let mut log = UndoLog::default();
        for r in records {
            log.apply(r);
        }
        log
    }

    /// Applies one record; returns whether it was one of the log's.
    pub fn apply(&mut self, record: &Record) -> bool {
        match record {
            Record::Checkpoint {
                turn_id,
                before,
                after,
                head,
            } => {
                // A new change: what was undone before it can no longer be redone.
                self.redoable.clear();
                self.turns.push(TurnSnapshots {
                    turn_id: *turn_id,
                    before: before.clone(),
                    after: after.clone(),
                    undone: false,
                    head: head.clone(),
                });
                true
            }
            Record::Undone {
                turn_id,
                before,
                after,
            } => {
                if let Some(t) = self.turns.iter_mut().rev().find(|t| t.turn_id == *turn_id) {
                    t.undone = true;
                }
                self.redoable.push(UndoneChange {
                    turn_id: *turn_id,
                    before: before.clone(),
                    after: after.clone(),
                });
                true
            }
            Record::Redone { turn_id } => {
                if let Some(pos) = self.redoable.iter().rposition(|u| u.turn_id == *turn_id) {
                    self.redoable.remove(pos);
                }
                if let Some(t) = self.turns.iter_mut().rev().find(|t| t.turn_id == *turn_id) {
                    t.undone = false;
                }
                true
            }
            // Any new turn ends the chance to redo (even one that changed nothing).
            Record::Turn { .. } => {
                self.redoable.clear();
                false
            }
            _ => false,
        }
    }

    /// The newest turn not undone yet.
    pub fn next_undo(&self) -> Option<&TurnSnapshots> {
        self.turns.iter().rev().find(|t| !t.undone)
    }

    /// The newest undo that can be redone.
    pub fn next_redo(&self) -> Option<&UndoneChange> {
        self.redoable.last()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(turn_id: u64) -> Record {
        Record::Checkpoint {
            turn_id,
            before: format!("b{turn_id}"),
            after: format!("a{turn_id}"),
            head: None,
        }
    }

    #[test]
    fn undo_walks_back_and_redo_lasts_until_the_next_turn() {
        let undone = |turn_id| Record::Undone {
            turn_id,
            before: format!("u{turn_id}"),
            after: format!("v{turn_id}"),
        };
        let mut log = UndoLog::of(&[cp(1), cp(2)]);
        assert_eq!(log.next_undo().unwrap().turn_id, 2);
        log.apply(&undone(2));
        assert_eq!(log.next_undo().unwrap().turn_id, 1);
        assert_eq!(log.next_redo().unwrap().before, "u2");
        log.apply(&Record::Redone { turn_id: 2 });
        assert_eq!(log.next_undo().unwrap().turn_id, 2);
        assert!(log.next_redo().is_none());
        log.apply(&undone(2));
        log.apply(&Record::Turn {
            turn_id: 3,
            text: "next".into(),
            at: String::new(),
        });
        assert!(log.next_redo().is_none(), "a new turn ends redo");
        assert_eq!(log.next_undo().unwrap().turn_id, 1);
    }
}
