//! Keyboard, paste and mouse input. Layers take keys in order — pager, approval modal, search bar,
//! global keys, popup, composer — and each layer consumes what it understands.

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEvent, MouseEventKind};

use super::app::{App, Effect, Popup};
use crate::protocol::{ApprovalDecision, Op};

const DOUBLE_CTRL_C: Duration = Duration::from_secs(1);
const WHEEL_ROWS: usize = 3;

impl App {
    pub fn handle_paste(&mut self, text: &str) {
        if let Some(a) = self.approvals.front_mut()
            && let Some(reason) = a.reason.as_mut()
        {
            reason.push_str(&text.replace(['\n', '\r'], " "));
            return;
        }
        if let Some(q) = self.search_input.as_mut() {
            q.push_str(text.lines().next().unwrap_or(""));
            return;
        }
        self.composer.paste(text);
        self.refresh_popup();
    }

    pub fn handle_mouse(&mut self, mouse: MouseEvent) {
        let h = self.viewport.get().1;
        match mouse.kind {
            MouseEventKind::ScrollUp => {
                if let Some(p) = self.pager.as_mut() {
                    p.scroll(-(WHEEL_ROWS as isize), h as usize);
                } else {
                    self.scroll_transcript_up(WHEEL_ROWS);
                }
            }
            MouseEventKind::ScrollDown => {
                if let Some(p) = self.pager.as_mut() {
                    p.scroll(WHEEL_ROWS as isize, h as usize);
                } else {
                    self.transcript.scroll_down(WHEEL_ROWS);
                }
            }
            _ => {}
        }
    }

    fn scroll_transcript_up(&mut self, rows: usize) {
        let (w, h) = self.viewport.get();
        let mut t = std::mem::take(&mut self.transcript);
        t.scroll_up(rows, w, h, &self.ctx());
        self.transcript = t;
    }

    pub fn handle_key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        // Ctrl+C works everywhere: interrupt first, quit on the second press within a second.
        if ctrl && key.code == KeyCode::Char('c') {
            self.ctrl_c();
            return;
        }
        self.last_ctrl_c = None;
        if self.hint.is_some() {
            self.hint = None;
        }
        if self.pager.is_some() {
            self.pager_key(key);
            return;
        }
        if let Some(a) = self.approvals.front_mut() {
            if a.is_armed(self.now) {
                self.approval_key(key);
                return;
            }
            // Typed ahead, before the modal could be read: the key goes where it would have
            // gone without the modal (the composer keeps the words), and the modal waits for
            // the typing to pause.
            a.typed_at = Some(self.now);
        }
        if let Some(redo) = self.pending_undo.take() {
            self.undo_confirm_key(key, redo);
            return;
        }
        if self.search_input.is_some() {
            self.search_key(key);
            return;
        }
        if self.global_key(key) {
            return;
        }
        if self.popup_key(key) {
            return;
        }
        self.composer_key(key);
    }

    /// The answer to "apply this undo?": `y` applies it, any other key cancels.
    fn undo_confirm_key(&mut self, key: KeyEvent, redo: bool) {
        let what = if redo { "Redo" } else { "Undo" };
        if matches!(key.code, KeyCode::Char('y') | KeyCode::Char('Y')) {
            self.send(Op::Undo {
                redo,
                apply: true,
                force: false,
            });
        } else {
            self.push_notice(
                super::cell::NoticeLevel::Info,
                format!("{what} cancelled: no file was changed"),
                vec![],
            );
        }
    }

    fn ctrl_c(&mut self) {
        let now = self.now;
        let second = self
            .last_ctrl_c
            .is_some_and(|t| now.saturating_duration_since(t) <= DOUBLE_CTRL_C);
        if second || self.shutdown_started.is_some() {
            self.request_quit();
            return;
        }
        self.last_ctrl_c = Some(now);
        if self.status.working {
            self.interrupt();
        } else if !self.composer.is_empty() {
            self.composer.clear();
            self.refresh_popup();
        }
        self.pager = None;
        self.search_input = None;
        self.session_picker = None;
        self.hint_for("press Ctrl+C again to quit", now + DOUBLE_CTRL_C);
    }

    fn interrupt(&mut self) {
        self.send(Op::Interrupt);
        self.status.phase = super::status::Phase::Interrupting;
        // Pending approvals die with the turn: deny them so the core is not left waiting.
        while let Some(a) = self.approvals.pop_front() {
            self.send(Op::Approval {
                call_id: a.call_id,
                decision: ApprovalDecision::Deny,
            });
        }
    }

    fn pager_key(&mut self, key: KeyEvent) {
        let h = self.viewport.get().1.max(1) as usize; // the pager body height of the last frame
        let Some(p) = self.pager.as_mut() else { return };
        if let Some(input) = p.search_input.as_mut() {
            match key.code {
                KeyCode::Enter => {
                    p.query = p.search_input.take().unwrap_or_default();
                    p.find(true, h);
                }
                KeyCode::Esc => p.search_input = None,
                KeyCode::Backspace => {
                    input.pop();
                }
                KeyCode::Char(c) => input.push(c),
                _ => {}
            }
            return;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => self.pager = None,
            KeyCode::Up | KeyCode::Char('k') => p.scroll(-1, h),
            KeyCode::Down | KeyCode::Char('j') | KeyCode::Enter => p.scroll(1, h),
            KeyCode::PageUp | KeyCode::Char('b') => p.scroll(-(h as isize - 1), h),
            KeyCode::PageDown | KeyCode::Char(' ') => p.scroll(h as isize - 1, h),
            KeyCode::Home | KeyCode::Char('g') => p.top = 0,
            KeyCode::End | KeyCode::Char('G') => p.top = p.max_top(h),
            KeyCode::Char('/') => p.search_input = Some(String::new()),
            KeyCode::Char('n') => {
                p.find(true, h);
            }
            KeyCode::Char('N') => {
                p.find(false, h);
            }
            _ => {}
        }
    }

    fn approval_key(&mut self, key: KeyEvent) {
        let Some(a) = self.approvals.front_mut() else {
            return;
        };
        if let Some(reason) = a.reason.as_mut() {
            match key.code {
                KeyCode::Enter => {
                    let reason = reason.trim().to_string();
                    let decision = if reason.is_empty() {
                        ApprovalDecision::Deny
                    } else {
                        ApprovalDecision::DenyWithReason { reason }
                    };
                    self.answer_approval(decision);
                }
                KeyCode::Esc => a.reason = None,
                KeyCode::Backspace => {
                    reason.pop();
                }
                KeyCode::Char(c) => reason.push(c),
                _ => {}
            }
            return;
        }
        match key.code {
            KeyCode::Esc => self.answer_approval(ApprovalDecision::Deny),
            KeyCode::Up => a.scroll = a.scroll.saturating_sub(1),
            KeyCode::Down => a.scroll += 1,
            KeyCode::PageUp => a.scroll = a.scroll.saturating_sub(10),
            KeyCode::PageDown => a.scroll += 10,
            KeyCode::Char(c) => {
                if let Some(decision) = a.decision_for_key(c) {
                    self.answer_approval(decision);
                }
            }
            _ => {}
        }
    }

    fn answer_approval(&mut self, decision: ApprovalDecision) {
        if let Some(a) = self.approvals.pop_front() {
            // Approved, it starts running; denied, its end arrives as `declined`.
            self.set_tool_cell(&a.call_id, |t| t.awaiting_approval = false);
            self.send(Op::Approval {
                call_id: a.call_id,
                decision,
            });
        }
        if self.approvals.is_empty()
            && matches!(self.status.phase, super::status::Phase::AwaitingApproval)
        {
            self.status.phase = if self.status.working {
                super::status::Phase::Answering
            } else {
                super::status::Phase::Idle
            };
        }
    }

    fn search_key(&mut self, key: KeyEvent) {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let Some(query) = self.search_input.clone() else {
            return;
        };
        let (w, h) = self.viewport.get();
        let step = |app: &mut App, older: bool| {
            let mut t = std::mem::take(&mut app.transcript);
            let found = t.search_step(&query, older, w, h, &app.ctx());
            app.transcript = t;
            if !found {
                app.hint = Some(format!(
                    "no {} match for '{query}'",
                    if older { "older" } else { "newer" }
                ));
            }
        };
        let command = format!("/{}", query.trim());
        match key.code {
            KeyCode::Esc => {
                self.search_input = None;
                self.transcript.search = None;
            }
            // `/quit` typed while scrolled up: the user meant the command, not a search.
            KeyCode::Enter
                if self.search_from_slash
                    && matches!(super::slash::parse_slash(&command), Some(Ok(_))) =>
            {
                self.search_input = None;
                self.transcript.search = None;
                self.transcript.scroll = 0;
                self.submit(command);
            }
            KeyCode::Enter | KeyCode::Up => step(self, true),
            KeyCode::Char('f') | KeyCode::Char('p') if ctrl => step(self, true),
            KeyCode::Char('n') if ctrl => step(self, false),
            KeyCode::Down => step(self, false),
            KeyCode::Backspace => {
                if let Some(q) = self.search_input.as_mut() {
                    q.pop();
                }
                self.search_query_changed();
            }
            KeyCode::Char(c) if !ctrl => {
                if let Some(q) = self.search_input.as_mut() {
                    q.push(c);
                }
                self.search_query_changed();
            }
            _ => {}
        }
    }

    /// The search bar's text changed: highlight and count its matches anew.
    fn search_query_changed(&mut self) {
        let query = self.search_input.clone().unwrap_or_default();
        let width = self.viewport.get().0;
        let mut t = std::mem::take(&mut self.transcript);
        t.set_search_query(&query, width, &self.ctx());
        self.transcript = t;
    }

    /// Keys that work whatever the composer holds. Returns true when consumed.
    fn global_key(&mut self, key: KeyEvent) -> bool {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let page = self.viewport.get().1.saturating_sub(2).max(1) as usize;
        match key.code {
            KeyCode::Char('d') if ctrl && self.composer.is_empty() => self.request_quit(),
            KeyCode::Char('o') if ctrl => self.toggle_expanded(),
            KeyCode::Char('f') if ctrl => {
                self.search_input = Some(String::new());
                self.search_from_slash = false;
                self.hint =
                    Some("search: type, Enter for older matches, Ctrl+N newer, Esc closes".into());
            }
            KeyCode::Char('g') if ctrl => self
                .effects
                .push(Effect::OpenEditor(self.composer.text().to_string())),
            KeyCode::Char('l') if ctrl => self.transcript.scroll = 0,
            KeyCode::F(2) => self.toggle_mouse(),
            KeyCode::BackTab => self.cycle_approval_policy(),
            KeyCode::PageUp => self.scroll_transcript_up(page),
            KeyCode::PageDown => self.transcript.scroll_down(page),
            KeyCode::Up if key.modifiers.contains(KeyModifiers::SHIFT) => {
                self.scroll_transcript_up(1)
            }
            KeyCode::Down if key.modifiers.contains(KeyModifiers::SHIFT) => {
                self.transcript.scroll_down(1)
            }
            KeyCode::Home if ctrl => {
                let (w, h) = self.viewport.get();
                let mut t = std::mem::take(&mut self.transcript);
                t.scroll_to_top(w, h, &self.ctx());
                self.transcript = t;
            }
            KeyCode::End if ctrl || (self.composer.is_empty() && self.transcript.scroll > 0) => {
                self.transcript.scroll = 0
            }
            KeyCode::Char('/') if self.composer.is_empty() && self.transcript.scroll > 0 => {
                // While reading scrolled-up history, `/` searches (as in a pager).
                self.search_input = Some(String::new());
                self.search_from_slash = true;
            }
            KeyCode::Esc => {
                if self.session_picker.is_some() {
                    self.session_picker = None;
                } else if !matches!(self.popup(), Popup::None) {
                    // Closing the popup keeps the text; a space ends the token.
                    self.file_matches.clear();
                    if self.composer.text().starts_with('/') {
                        self.composer.clear();
                    }
                } else if self.status.working {
                    self.interrupt();
                } else if self.transcript.scroll > 0 {
                    self.transcript.scroll = 0;
                } else if !self.queue.is_empty() {
                    self.queue.clear();
                    self.hint = Some("queued messages dropped".into());
                } else {
                    return false;
                }
            }
            _ => return false,
        }
        true
    }

    /// Up/Down/Tab/Enter in a visible popup. Returns true when consumed.
    fn popup_key(&mut self, key: KeyEvent) -> bool {
        let popup = self.popup();
        let len = match &popup {
            Popup::None => return false,
            Popup::Slash(c) => c.len(),
            Popup::Files(f) => f.len(),
            Popup::Sessions(s) => s.len(),
        };
        match key.code {
            KeyCode::Up => self.popup_selected = (self.popup_selected + len - 1) % len.max(1),
            KeyCode::Down => self.popup_selected = (self.popup_selected + 1) % len.max(1),
            KeyCode::Tab | KeyCode::Enter => {
                let i = self.popup_selected.min(len.saturating_sub(1));
                match popup {
                    Popup::Slash(entries) => {
                        let cmd = match &entries[i] {
                            super::slash::SlashEntry::Builtin(cmd) => *cmd,
                            super::slash::SlashEntry::Custom {
                                name,
                                takes_arguments,
                                ..
                            } => {
                                let complete = self
                                    .composer
                                    .text()
                                    .trim()
                                    .strip_prefix('/')
                                    .is_some_and(|typed| typed == name);
                                if key.code == KeyCode::Enter && (complete || !takes_arguments) {
                                    let text = format!("/{name}");
                                    self.composer.clear();
                                    self.submit(text);
                                } else {
                                    self.composer.set_text(&format!("/{name} "));
                                }
                                self.popup_selected = 0;
                                return true;
                            }
                        };
                        // Enter on a command typed in full runs it (arguments are optional
                        // for every command); on a prefix it completes, like Tab.
                        let complete = self
                            .composer
                            .text()
                            .trim()
                            .strip_prefix('/')
                            .is_some_and(|name| name.eq_ignore_ascii_case(cmd.name()));
                        if key.code == KeyCode::Enter
                            && (complete
                                || cmd.usage().is_empty()
                                || cmd == super::slash::SlashCommand::Resume
                                || cmd == super::slash::SlashCommand::Theme
                                || cmd == super::slash::SlashCommand::Expert)
                        {
                            self.composer.clear();
                            self.submit(format!("/{}", cmd.name()));
                        } else {
                            self.composer.set_text(&format!("/{} ", cmd.name()));
                        }
                    }
                    Popup::Files(files) => {
                        if let Some((start, _)) = self.composer.token_at_cursor('@') {
                            let path = if files[i].contains(' ') {
                                format!("\"{}\" ", files[i])
                            } else {
                                format!("{} ", files[i])
                            };
                            self.composer.replace_token(start, &path);
                        }
                        self.file_matches.clear();
                    }
                    Popup::Sessions(list) => {
                        let id = list[i].id.clone();
                        self.resume(id);
                    }
                    Popup::None => {}
                }
            }
            _ => return false,
        }
        true
    }

    fn composer_key(&mut self, key: KeyEvent) {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        let shift = key.modifiers.contains(KeyModifiers::SHIFT);
        let c = &mut self.composer;
        match key.code {
            KeyCode::Enter if shift || alt => c.newline(),
            KeyCode::Char('j') if ctrl => c.newline(),
            KeyCode::Enter => {
                // A trailing backslash continues the line (terminals without Shift+Enter).
                if c.text()[..c.cursor()].ends_with('\\') && c.cursor() == c.text().len() {
                    c.backspace();
                    c.newline();
                } else {
                    let text = c.take_submission();
                    self.submit(text);
                }
            }
            KeyCode::Backspace if ctrl || alt => c.delete_word_before(),
            KeyCode::Backspace => c.backspace(),
            KeyCode::Delete => c.delete(),
            KeyCode::Left if ctrl || alt => c.word_left(),
            KeyCode::Right if ctrl || alt => c.word_right(),
            KeyCode::Left => c.left(),
            KeyCode::Right => c.right(),
            KeyCode::Home => c.home(),
            KeyCode::End => c.end(),
            KeyCode::Char('a') if ctrl => c.home(),
            KeyCode::Char('e') if ctrl => c.end(),
            KeyCode::Char('u') if ctrl => c.kill_to_line_start(),
            KeyCode::Char('k') if ctrl => c.kill_to_line_end(),
            KeyCode::Char('w') if ctrl => c.delete_word_before(),
            KeyCode::Up => {
                if !c.up() {
                    c.history_prev(&self.history);
                }
            }
            KeyCode::Down => {
                if !c.down() {
                    c.history_next(&self.history);
                }
            }
            KeyCode::Tab => c.insert_str("    "),
            KeyCode::Char(ch) if !ctrl => c.insert_char(ch),
            _ => return,
        }
        self.refresh_popup();
    }
}
