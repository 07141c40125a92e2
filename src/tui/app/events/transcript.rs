//! The transcript's cells that streamed output makes: reasoning, the answer, tool calls.

use super::*;
use crate::protocol::{ApprovalRequest, Expert};

impl App {
    pub(super) fn finish_streams(&mut self) {
        if let Some(i) = self.streaming_reasoning.take()
            && let Some(CellKind::Reasoning(r)) = self.cell_mut(i)
        {
            r.streaming = false;
        }
        if let Some(i) = self.streaming_answer.take() {
            let empty = matches!(self.transcript.cells.get(i).map(HistoryCell::kind), Some(CellKind::Assistant(a)) if a.text.trim().is_empty());
            if empty && i + 1 == self.transcript.cells.len() {
                self.transcript.cells.pop();
            } else if let Some(CellKind::Assistant(a)) = self.cell_mut(i) {
                a.streaming = false;
            }
        }
    }

    /// Changes the tool cell of `call_id`, if it is still on screen.
    pub(in crate::tui) fn set_tool_cell(
        &mut self,
        call_id: &str,
        change: impl FnOnce(&mut ToolCell),
    ) {
        if let Some(&i) = self.tool_cells.get(call_id) {
            self.grow_cell(i, |k| {
                if let CellKind::Tool(t) = k {
                    change(t);
                }
            });
        }
    }

    pub(super) fn on_reasoning_delta(&mut self, delta: String) {
        if matches!(self.status.phase, Phase::Answering | Phase::Waiting) {
            self.status.phase = Phase::Thinking;
        }
        let index = match self.streaming_reasoning {
            Some(i) => i,
            None => {
                let i = self.push_cell(CellKind::Reasoning(ReasoningCell {
                    text: String::new(),
                    streaming: true,
                }));
                self.streaming_reasoning = Some(i);
                i
            }
        };
        self.grow_cell(index, |k| {
            if let CellKind::Reasoning(r) = k {
                r.text.push_str(&delta);
            }
        });
    }

    pub(super) fn on_message_delta(&mut self, delta: String, expert: Option<Expert>) {
        if matches!(self.status.phase, Phase::Thinking | Phase::Waiting) {
            self.status.phase = Phase::Answering;
        }
        if let Some(i) = self.streaming_reasoning.take()
            && let Some(CellKind::Reasoning(r)) = self.cell_mut(i)
        {
            r.streaming = false;
        }
        let index = match self.streaming_answer {
            Some(i) => i,
            None => {
                let badge = self.badge(expert.or(self.status.expert));
                let i = self.push_cell(CellKind::Assistant(AssistantCell::new(badge, true)));
                self.streaming_answer = Some(i);
                i
            }
        };
        self.grow_cell(index, |k| {
            if let CellKind::Assistant(a) = k {
                a.text.push_str(&delta);
            }
        });
    }

    pub(super) fn on_message_final(&mut self, text: String, expert: Option<Expert>) {
        if let Some(i) = self.streaming_reasoning.take()
            && let Some(CellKind::Reasoning(r)) = self.cell_mut(i)
        {
            r.streaming = false;
        }
        match self.streaming_answer.take() {
            Some(i) => {
                let keep = !text.trim().is_empty();
                self.grow_cell(i, |k| {
                    if let CellKind::Assistant(a) = k {
                        if keep {
                            a.text = text.clone();
                        }
                        a.streaming = false;
                    }
                });
                let empty = matches!(self.transcript.cells.get(i).map(HistoryCell::kind), Some(CellKind::Assistant(a)) if a.text.trim().is_empty());
                if empty && i + 1 == self.transcript.cells.len() {
                    self.transcript.cells.pop();
                }
            }
            None if !text.trim().is_empty() => {
                let badge = self.badge(expert.or(self.status.expert));
                let mut cell = AssistantCell::new(badge, false);
                cell.text = text.clone();
                self.push_cell(CellKind::Assistant(cell));
            }
            None => {}
        }
        if !text.trim().is_empty() {
            self.last_answer = Some(text);
        }
    }

    pub(super) fn on_tool_begin(&mut self, call_id: String, tool: String, title: String) {
        self.finish_streams();
        self.status.phase = Phase::RunningTool(tool.clone());
        let i = self.push_cell(CellKind::Tool(ToolCell::new(call_id.clone(), tool, title)));
        self.tool_cells.insert(call_id, i);
    }

    pub(super) fn on_tool_output(&mut self, call_id: String, chunk: String) {
        if let Some(&i) = self.tool_cells.get(&call_id) {
            self.grow_cell(i, |k| {
                if let CellKind::Tool(t) = k {
                    t.output.push_str(&chunk);
                }
            });
        }
    }

    pub(super) fn on_tool_end(
        &mut self,
        call_id: String,
        status: ToolStatus,
        exit_code: Option<i32>,
        duration_ms: u64,
        output: String,
    ) {
        if let Some(&i) = self.tool_cells.get(&call_id) {
            self.grow_cell(i, |k| {
                if let CellKind::Tool(t) = k {
                    if t.output.trim().is_empty() {
                        t.output = output;
                    }
                    t.status = Some(status);
                    t.exit_code = exit_code;
                    t.duration_ms = Some(duration_ms);
                }
            });
        }
        if matches!(self.status.phase, Phase::RunningTool(_)) {
            self.status.phase = if self.status.working {
                Phase::Answering
            } else {
                Phase::Idle
            };
        }
    }

    pub(super) fn on_file_diff(&mut self, call_id: String, path: String, diff: String) {
        // The `±` cell draws the diff; the tool's own cell then shows only its summary.
        self.set_tool_cell(&call_id, |t| t.diff_shown = true);
        self.push_cell(CellKind::Diff(DiffCell { path, diff }));
    }

    pub(super) fn on_approval_requested(&mut self, call_id: String, request: ApprovalRequest) {
        self.status.phase = Phase::AwaitingApproval;
        self.set_tool_cell(&call_id, |t| t.awaiting_approval = true);
        self.approvals
            .push_back(PendingApproval::new(call_id, request));
    }
}
