//! What the user's commands get back: undo and redo, `/diff`, `/mcp`, a resumed session.

use super::*;

impl App {
    pub(super) fn on_undo_planned(&mut self, redo: bool, lines: Vec<String>, actionable: bool) {
        let what = if redo { "Redo" } else { "Undo" };
        if actionable {
            self.pending_undo = Some(redo);
            self.push_notice(
                NoticeLevel::Warning,
                format!("{what} will change these files. Apply? (y/n)"),
                lines,
            );
        } else {
            self.push_notice(
                NoticeLevel::Info,
                format!("{what}: nothing to change"),
                lines,
            );
        }
    }

    pub(super) fn on_undo_completed(
        &mut self,
        restored: Vec<String>,
        removed: Vec<String>,
        kept: Vec<String>,
        redo: bool,
    ) {
        let what = if redo { "Redo" } else { "Undo" };
        let changed = !restored.is_empty() || !removed.is_empty();
        let mut body: Vec<String> = restored.iter().map(|f| format!("restored {f}")).collect();
        body.extend(removed.iter().map(|f| format!("removed  {f}")));
        body.extend(kept.iter().map(|f| format!("kept     {f}")));
        let title = match (changed, redo) {
            (false, _) => format!("{what}: nothing to restore"),
            (true, false) => "Undo: files restored (/redo reverts this)".to_string(),
            (true, true) => "Redo: the undone changes are back".to_string(),
        };
        self.push_notice(NoticeLevel::Info, title, body);
    }

    /// `/mcp`: one line per server (state, tool count, command or URL), its tools and its
    /// last error below it.
    pub(super) fn show_mcp_servers(&mut self, servers: &[crate::protocol::McpServerStatus]) {
        use crate::protocol::{McpServerState, terminal_safe_line};
        if servers.is_empty() {
            self.push_notice(
                NoticeLevel::Info,
                "No MCP servers configured (docs/mcp.md; `baton mcp add NAME -- CMD…`)",
                vec![],
            );
            return;
        }
        let mut body = Vec::new();
        for s in servers {
            let state = match s.state {
                McpServerState::Starting => "starting",
                McpServerState::Ready => "ready",
                McpServerState::Failed => "failed",
                McpServerState::Disabled => "disabled",
            };
            let required = if s.required { ", required" } else { "" };
            body.push(format!(
                "{}  {state}{required}  {} tools  {}",
                terminal_safe_line(&s.name),
                s.tools.len(),
                terminal_safe_line(&s.transport)
            ));
            if !s.tools.is_empty() {
                body.push(format!("    {}", terminal_safe_line(&s.tools.join(", "))));
            }
            if let Some(e) = &s.error {
                body.push(format!("    error: {}", terminal_safe_line(e)));
            }
        }
        let ready = servers
            .iter()
            .filter(|s| s.state == McpServerState::Ready)
            .count();
        self.push_notice(
            NoticeLevel::Info,
            format!("MCP servers: {ready} of {} ready", servers.len()),
            body,
        );
    }

    /// `/diff`'s answer: the pager over the diff, or a notice when there is nothing to page.
    pub(super) fn show_workspace_diff(&mut self, diff: String, error: Option<String>) {
        if let Some(e) = error {
            self.push_notice(NoticeLevel::Error, format!("/diff: {e}"), vec![]);
        } else if diff.trim().is_empty() {
            self.push_notice(NoticeLevel::Info, "No changes in the workspace", vec![]);
        } else {
            let width = self.viewport.get().0.max(20) as usize;
            let lines = crate::tui::cell::render_diff_lines(&diff, width, &self.theme, false);
            self.pager = Some(Pager::new("git diff (untracked included)", lines));
        }
    }

    /// Shows the earlier turns of a resumed session, read back from its file.
    pub(super) fn show_resumed(&mut self, session_id: &str) {
        let turns = match self.session_file.clone() {
            Some(f) => crate::tui::resume_view::past_turns(std::path::Path::new(&f)),
            None => Ok(Vec::new()),
        };
        match turns {
            Ok(turns) if !turns.is_empty() => {
                self.push_notice(
                    NoticeLevel::Info,
                    format!("Resumed session {session_id} — the conversation so far:"),
                    vec![],
                );
                for t in turns {
                    self.push_cell(CellKind::User(UserCell {
                        text: t.user,
                        shell: false,
                    }));
                    if !t.tools.is_empty() {
                        let n = t.tools.len();
                        self.push_notice(
                            NoticeLevel::Info,
                            format!("{n} tool call{}", if n == 1 { "" } else { "s" }),
                            t.tools,
                        );
                    }
                    match t.ended {
                        Some(TurnStatus::Done) => {}
                        Some(TurnStatus::Interrupted) | None => self.push_notice(
                            NoticeLevel::Warning,
                            "(this turn was interrupted)",
                            vec![],
                        ),
                        Some(TurnStatus::LimitReached) => self.push_notice(
                            NoticeLevel::Warning,
                            "(this turn stopped at a limit)",
                            vec![],
                        ),
                        Some(TurnStatus::Error) => {
                            self.push_notice(NoticeLevel::Warning, "(this turn failed)", vec![])
                        }
                    }
                    if let Some(answer) = t.answer {
                        let mut cell = AssistantCell::new(t.expert, false);
                        cell.text = answer.clone();
                        self.push_cell(CellKind::Assistant(cell));
                        self.last_answer = Some(answer);
                    }
                }
                self.push_notice(NoticeLevel::Info, "End of the earlier conversation", vec![]);
            }
            Ok(_) => self.push_notice(
                NoticeLevel::Info,
                format!("Resumed session {session_id}"),
                vec![],
            ),
            Err(e) => self.push_notice(
                NoticeLevel::Warning,
                format!("Resumed session {session_id}, but its history cannot be shown"),
                vec![e],
            ),
        }
    }
}
