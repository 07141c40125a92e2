//! The UI state and how protocol events change it. Pure: no terminal, no channels — what the UI
//! wants done outside (send an op, open the editor, copy, run git) is queued as an `Effect` for the
//! event loop. Tests drive it directly.

use std::cell::Cell as StdCell;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use super::advice::advice_for;
use super::approval::PendingApproval;
use super::cell::{
    AssistantCell, CellKind, DiffCell, HistoryCell, NoticeCell, NoticeLevel, PlanCell,
    ReasoningCell, RenderCtx, ToolCell, UserCell,
};
use super::color_depth::ColorDepth;
use super::composer::Composer;
use super::file_complete::FileIndex;
use super::history::History;
use super::options::TuiOptions;
use super::pager::Pager;
use super::sessions::SessionEntry;
use super::status::{Phase, StatusInfo};
use super::theme::Theme;
use super::transcript::Transcript;
use crate::protocol::{Event, Op, ToolStatus, TurnStatus};

/// Work for the event loop.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Op(Op),
    /// Suspend the terminal and edit the composer text in $VISUAL / $EDITOR.
    OpenEditor(String),
    /// Run `git diff` in the workspace and show it in the pager.
    ShowDiff,
    /// Copy via OSC 52.
    Copy(String),
    SetMouseCapture(bool),
}

/// What the popup above the composer shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Popup {
    None,
    Slash(Vec<super::slash::SlashCommand>),
    Files(Vec<String>),
    Sessions(Vec<SessionEntry>),
}

pub struct App {
    pub opts: TuiOptions,
    pub theme: Theme,
    pub depth: ColorDepth,
    /// Bumped whenever every cached layout becomes stale (theme, Ctrl+O).
    pub generation: u64,
    pub expanded: bool,
    pub transcript: Transcript,
    pub composer: Composer,
    pub history: History,
    pub status: StatusInfo,
    pub approvals: VecDeque<PendingApproval>,
    pub pager: Option<Pager>,
    pub popup_selected: usize,
    /// The session picker (/resume without an id) — the other popups derive from the composer.
    pub session_picker: Option<Vec<SessionEntry>>,
    pub file_index: Option<FileIndex>,
    pub file_matches: Vec<String>,
    /// The Ctrl+F search bar's text while it is open.
    pub search_input: Option<String>,
    /// Messages typed while a turn runs, sent one by one as turns complete.
    pub queue: VecDeque<String>,
    pub effects: Vec<Effect>,
    pub now: Instant,
    pub last_ctrl_c: Option<Instant>,
    pub shutdown_started: Option<Instant>,
    /// Set when the UI should exit, with the exit code.
    pub exit: Option<i32>,
    pub mouse_capture: bool,
    /// A short message in the footer (e.g. "press Ctrl+C again to quit").
    pub hint: Option<String>,
    pub session_id: Option<String>,
    pub session_file: Option<String>,
    pub last_answer: Option<String>,
    /// Transcript viewport (width, height) of the last frame, for scrolling by pages.
    pub viewport: StdCell<(u16, u16)>,
    echo_pending: VecDeque<String>,
    streaming_answer: Option<usize>,
    streaming_reasoning: Option<usize>,
    tool_cells: HashMap<String, usize>,
    /// The expert named by the last answer's badge in this turn: repeats are not shown again.
    last_badge: Option<crate::protocol::Expert>,
}

impl App {
    pub fn new(opts: TuiOptions, now: Instant) -> App {
        let depth = ColorDepth::detect(opts.no_color);
        App::with_depth(opts, depth, now)
    }

    /// Like `new` with an explicit colour depth (tests, `--no-color`).
    pub fn with_depth(opts: TuiOptions, depth: ColorDepth, now: Instant) -> App {
        let mut warnings = Vec::new();
        let theme = match Theme::load(&opts.theme, opts.config_dir.as_deref(), depth) {
            Ok(t) => t,
            Err(e) => {
                warnings.push(format!("{e}; using the dark theme"));
                Theme::default_for(depth)
            }
        };
        let (history, warn) = History::load(opts.history_file.as_deref());
        warnings.extend(warn);
        let mouse_capture = opts.mouse_capture;
        let mut app = App {
            session_file: opts.session_file.as_ref().map(|p| p.display().to_string()),
            opts,
            theme,
            depth,
            generation: 0,
            expanded: false,
            transcript: Transcript::default(),
            composer: Composer::default(),
            history,
            status: StatusInfo::default(),
            approvals: VecDeque::new(),
            pager: None,
            popup_selected: 0,
            session_picker: None,
            file_index: None,
            file_matches: Vec::new(),
            search_input: None,
            queue: VecDeque::new(),
            effects: Vec::new(),
            now,
            last_ctrl_c: None,
            shutdown_started: None,
            exit: None,
            mouse_capture,
            hint: None,
            session_id: None,
            last_answer: None,
            viewport: StdCell::new((80, 20)),
            echo_pending: VecDeque::new(),
            streaming_answer: None,
            streaming_reasoning: None,
            tool_cells: HashMap::new(),
            last_badge: None,
        };
        app.push_welcome();
        for w in warnings {
            app.push_notice(NoticeLevel::Warning, w, vec![]);
        }
        if let Some(prompt) = app.opts.initial_prompt.clone()
            && !prompt.trim().is_empty()
        {
            app.submit(prompt);
        }
        app
    }

    pub fn ctx(&self) -> RenderCtx<'_> {
        RenderCtx {
            theme: &self.theme,
            expanded: self.expanded,
            experts: &self.opts.experts,
            generation: self.generation,
        }
    }

    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    pub fn send(&mut self, op: Op) {
        self.effects.push(Effect::Op(op));
    }

    fn push_welcome(&mut self) {
        let o = &self.opts;
        let mut body = vec![format!("workspace  {}", o.workspace.display())];
        if !o.endpoint.is_empty() {
            body.push(format!("endpoint   {}", o.endpoint));
        }
        body.push(format!("mode       {} · profile {}", o.mode, o.profile));
        body.push("Type a request and press Enter. /help lists commands and keys.".into());
        self.push_notice(
            NoticeLevel::Info,
            "baton — terminal coding agent on a Mixture-of-LoRA model",
            body,
        );
    }

    pub fn push_notice(&mut self, level: NoticeLevel, title: impl Into<String>, body: Vec<String>) {
        self.push_cell(CellKind::Notice(NoticeCell::new(level, title, body)));
    }

    pub fn push_cell(&mut self, kind: CellKind) -> usize {
        self.keep_view_still(|t| t.push(HistoryCell::new(kind)));
        self.transcript.cells.len() - 1
    }

    fn cell_mut(&mut self, index: usize) -> Option<&mut CellKind> {
        // Index-based access goes through `keep_view_still` by the callers that grow cells.
        self.transcript
            .cells
            .get_mut(index)
            .map(HistoryCell::kind_mut)
    }

    /// Applies a change to the transcript; when the user has scrolled up, the scroll offset grows
    /// by the rows added below, so the text being read does not move.
    fn keep_view_still(&mut self, change: impl FnOnce(&mut Transcript)) {
        if self.transcript.scroll == 0 {
            change(&mut self.transcript);
            return;
        }
        let width = self.viewport.get().0;
        let from = self.transcript.cells.len().saturating_sub(1);
        let before = self.transcript.tail_height(from, width, &self.ctx());
        change(&mut self.transcript);
        let after = self.transcript.tail_height(from, width, &self.ctx());
        self.transcript.scroll = (self.transcript.scroll + after).saturating_sub(before);
    }

    fn grow_cell(&mut self, index: usize, change: impl FnOnce(&mut CellKind)) {
        if self.transcript.scroll == 0 {
            if let Some(kind) = self.cell_mut(index) {
                change(kind);
            }
            return;
        }
        let width = self.viewport.get().0;
        let before = self.transcript.tail_height(index, width, &self.ctx());
        if let Some(kind) = self.cell_mut(index) {
            change(kind);
        }
        let after = self.transcript.tail_height(index, width, &self.ctx());
        self.transcript.scroll = (self.transcript.scroll + after).saturating_sub(before);
    }

    /// The expert to name above a new answer: only when it differs from the previous answer's.
    fn badge(
        &mut self,
        expert: Option<crate::protocol::Expert>,
    ) -> Option<crate::protocol::Expert> {
        if expert.is_none() || expert == self.last_badge {
            return None;
        }
        self.last_badge = expert;
        expert
    }

    pub fn set_theme(&mut self, theme: Theme) {
        self.theme = theme;
        self.generation += 1;
    }

    pub fn toggle_expanded(&mut self) {
        self.expanded = !self.expanded;
        self.generation += 1;
    }

    /// A new user turn, a shell command or a slash command from the composer (or the queue).
    pub fn submit(&mut self, text: String) {
        if let Err(e) = self.history.push(text.trim()) {
            self.push_notice(NoticeLevel::Warning, e, vec![]);
        }
        self.dispatch(text);
    }

    /// Sends (or queues) what was submitted; queued messages come back through here.
    fn dispatch(&mut self, text: String) {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return;
        }
        if let Some(parsed) = super::slash::parse_slash(trimmed) {
            match parsed {
                Ok((cmd, args)) => {
                    if self.status.working && !cmd.available_during_turn() {
                        self.queue.push_back(trimmed.to_string());
                        self.hint = Some(format!("/{} queued until the turn ends", cmd.name()));
                    } else {
                        self.run_slash(cmd, &args);
                    }
                }
                Err(name) => self.push_notice(
                    NoticeLevel::Error,
                    format!("Unknown command {name}"),
                    vec!["/help lists the commands.".into()],
                ),
            }
            return;
        }
        if self.status.working {
            self.queue.push_back(text);
            return;
        }
        if let Some(cmd) = trimmed.strip_prefix('!') {
            let cmd = cmd.trim().to_string();
            if cmd.is_empty() {
                return;
            }
            self.push_cell(CellKind::User(UserCell {
                text: cmd.clone(),
                shell: true,
            }));
            self.send(Op::UserShell { command: cmd });
            return;
        }
        self.push_cell(CellKind::User(UserCell {
            text: text.clone(),
            shell: false,
        }));
        self.echo_pending.push_back(text.clone());
        self.status.working = true;
        self.status.phase = Phase::Waiting;
        self.status.turn_started = Some(self.now);
        self.status.hops = Default::default();
        self.last_badge = None;
        // The last turn's expert is not this one's: routing decides anew (unless pinned).
        self.status.expert = self.status.pinned;
        self.status.decision = self
            .status
            .pinned
            .map(|_| crate::protocol::RouteDecision::Pinned);
        self.transcript.scroll = 0;
        self.send(Op::UserTurn { text });
    }

    /// Sends the next queued message once the agent is free.
    fn drain_queue(&mut self) {
        while !self.status.working {
            let Some(next) = self.queue.pop_front() else {
                break;
            };
            self.dispatch(next);
        }
    }

    pub fn request_quit(&mut self) {
        if self.shutdown_started.is_some() {
            return;
        }
        self.shutdown_started = Some(self.now);
        self.status.phase = Phase::ShuttingDown;
        self.send(Op::Shutdown);
    }

    fn finish_streams(&mut self) {
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

    /// Applies one event from the core.
    pub fn handle_event(&mut self, event: Event) {
        match event {
            Event::Session {
                session_id,
                mode,
                backend,
                resumed,
                session_file,
                ..
            } => {
                self.opts.mode = mode;
                if !backend.is_empty() {
                    self.opts.endpoint = backend;
                }
                if let Some(f) = session_file {
                    self.session_file = Some(f);
                }
                if resumed {
                    self.show_resumed(&session_id);
                } else if self.session_id.is_some() {
                    self.push_notice(
                        NoticeLevel::Info,
                        format!("New session {session_id}"),
                        vec![],
                    );
                }
                self.session_id = Some(session_id);
            }
            Event::TurnStarted { text, .. } => {
                self.last_badge = None;
                if self
                    .echo_pending
                    .front()
                    .is_some_and(|sent| sent.trim() == text.trim())
                {
                    self.echo_pending.pop_front();
                } else {
                    self.push_cell(CellKind::User(UserCell { text, shell: false }));
                }
                self.status.working = true;
                if self.status.turn_started.is_none() || matches!(self.status.phase, Phase::Idle) {
                    self.status.turn_started = Some(self.now);
                    self.status.hops = Default::default();
                }
                if matches!(self.status.phase, Phase::Idle) {
                    self.status.phase = Phase::Waiting;
                }
            }
            Event::HopStarted { hop, expert, .. } => {
                if matches!(self.status.phase, Phase::ShuttingDown) {
                    return;
                }
                self.status.phase = Phase::for_hop(hop);
                if hop == crate::protocol::Hop::Answer && expert.is_some() {
                    self.status.expert = expert;
                }
            }
            Event::HopCompleted {
                hop,
                latency_ms,
                ttft_ms,
                ..
            } => {
                let h = &mut self.status.hops;
                match hop {
                    crate::protocol::Hop::Route => h.route_ms = Some(latency_ms),
                    crate::protocol::Hop::Answer => {
                        h.answer_ms += latency_ms;
                        h.answer_hops += 1;
                        if h.ttft_ms.is_none() {
                            h.ttft_ms = ttft_ms;
                        }
                    }
                    crate::protocol::Hop::Summary => h.summary_ms = Some(latency_ms),
                    crate::protocol::Hop::Compaction => {}
                }
                if !self.status.working
                    && matches!(self.status.phase, Phase::Summarizing | Phase::Compacting)
                {
                    self.status.phase = Phase::Idle;
                }
            }
            Event::RouteDecided {
                expert,
                decision,
                reason,
                latency_ms,
                ..
            } => {
                self.status.expert = Some(expert);
                self.status.decision = Some(decision);
                self.status.route_reason = reason.clone();
                if decision == crate::protocol::RouteDecision::Model
                    && self.status.hops.route_ms.is_none()
                {
                    self.status.hops.route_ms = Some(latency_ms);
                }
                if decision == crate::protocol::RouteDecision::Fallback {
                    let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
                    self.push_notice(
                        NoticeLevel::Warning,
                        format!(
                            "Routing failed{why}; {expert} ({}) answers instead",
                            self.opts.experts.name(expert)
                        ),
                        vec![],
                    );
                }
            }
            Event::ReasoningDelta { delta, .. } => {
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
            Event::MessageDelta { delta, expert, .. } => {
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
                        let i =
                            self.push_cell(CellKind::Assistant(AssistantCell::new(badge, true)));
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
            Event::MessageFinal { text, expert, .. } => {
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
            Event::ToolBegin {
                call_id,
                tool,
                title,
                ..
            } => {
                self.finish_streams();
                self.status.phase = Phase::RunningTool(tool.clone());
                let i = self.push_cell(CellKind::Tool(ToolCell::new(call_id.clone(), tool, title)));
                self.tool_cells.insert(call_id, i);
            }
            Event::ToolOutput { call_id, chunk } => {
                if let Some(&i) = self.tool_cells.get(&call_id) {
                    self.grow_cell(i, |k| {
                        if let CellKind::Tool(t) = k {
                            t.output.push_str(&chunk);
                        }
                    });
                }
            }
            Event::ToolEnd {
                call_id,
                status,
                exit_code,
                duration_ms,
                output,
            } => {
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
            Event::FileDiff { path, diff, .. } => {
                self.push_cell(CellKind::Diff(DiffCell { path, diff }));
            }
            Event::PlanUpdated { items } => {
                self.push_cell(CellKind::Plan(PlanCell { items }));
            }
            Event::ApprovalRequested { call_id, request } => {
                self.status.phase = Phase::AwaitingApproval;
                self.approvals
                    .push_back(PendingApproval::new(call_id, request));
            }
            Event::SummaryRecorded { latency_ms, .. } => {
                self.status.hops.summary_ms = Some(latency_ms);
                if !self.status.working && matches!(self.status.phase, Phase::Summarizing) {
                    self.status.phase = Phase::Idle;
                }
            }
            Event::Usage {
                usage,
                context_used,
                context_window,
                ..
            } => {
                self.status.tokens_in += usage.prompt_tokens;
                self.status.tokens_out += usage.completion_tokens;
                if context_used.is_some() {
                    self.status.context_used = context_used;
                }
                if context_window.is_some() {
                    self.status.context_window = context_window;
                }
            }
            Event::ContextCompacted {
                expert,
                tokens_before,
                tokens_after,
                method,
            } => {
                self.status.context_used = Some(tokens_after);
                let how = if method == "summary" {
                    "summarized".to_string()
                } else {
                    format!("compacted ({method})")
                };
                self.push_notice(
                    NoticeLevel::Info,
                    format!("Context of {expert} {how}: {tokens_before} → {tokens_after} tokens"),
                    vec![],
                );
                if !self.status.working {
                    self.status.phase = Phase::Idle;
                }
            }
            Event::UndoCompleted { restored, removed } => {
                let mut body: Vec<String> =
                    restored.iter().map(|f| format!("restored {f}")).collect();
                body.extend(removed.iter().map(|f| format!("removed  {f}")));
                let title = if body.is_empty() {
                    "Undo: nothing to restore".to_string()
                } else {
                    "Undo: files restored to the last checkpoint".to_string()
                };
                self.push_notice(NoticeLevel::Info, title, body);
            }
            Event::Warning { message } => self.push_notice(NoticeLevel::Warning, message, vec![]),
            Event::Error { message, hop } => {
                let mut body = Vec::new();
                if let Some(h) = hop {
                    if !message.contains(h.as_str()) {
                        body.push(format!("during the {h} hop"));
                    }
                    // A failed background hop (summary, compaction) ends that phase.
                    if !self.status.working
                        && matches!(
                            h,
                            crate::protocol::Hop::Summary | crate::protocol::Hop::Compaction
                        )
                    {
                        self.status.phase = Phase::Idle;
                    }
                }
                if let Some(a) = advice_for(&message, &self.opts.endpoint) {
                    body.push(a);
                }
                self.push_notice(NoticeLevel::Error, message, body);
            }
            Event::TurnCompleted {
                status,
                duration_ms,
                answer,
                expert,
                ..
            } => {
                self.finish_streams();
                // Tool cells still marked running were cut off by the end of the turn.
                let running: Vec<usize> = self.tool_cells.drain().map(|(_, i)| i).collect();
                for i in running {
                    if let Some(CellKind::Tool(t)) =
                        self.transcript.cells.get(i).map(HistoryCell::kind)
                        && t.status.is_none()
                        && let Some(CellKind::Tool(t)) = self.cell_mut(i)
                    {
                        t.status = Some(ToolStatus::Interrupted);
                    }
                }
                if let Some(a) = answer.filter(|a| !a.trim().is_empty()) {
                    self.last_answer = Some(a);
                }
                if expert.is_some() {
                    self.status.expert = expert;
                }
                self.status.working = false;
                self.status.last_turn_ms = Some(duration_ms);
                self.status.turn_started = None;
                if !matches!(self.status.phase, Phase::Summarizing | Phase::ShuttingDown) {
                    self.status.phase = Phase::Idle;
                }
                self.approvals.clear();
                match status {
                    TurnStatus::Done => {}
                    TurnStatus::Interrupted => self.push_notice(
                        NoticeLevel::Warning,
                        "Interrupted",
                        vec!["The turn stopped; the session is still usable.".into()],
                    ),
                    TurnStatus::LimitReached => self.push_notice(
                        NoticeLevel::Warning,
                        "Stopped: the turn or time limit was reached",
                        vec![],
                    ),
                    TurnStatus::Error => {}
                }
                self.drain_queue();
            }
            Event::ShutdownComplete => {
                self.exit = Some(0);
            }
        }
    }

    /// Shows the earlier turns of a resumed session, read back from its file.
    fn show_resumed(&mut self, session_id: &str) {
        let turns = match self.session_file.clone() {
            Some(f) => super::resume_view::past_turns(std::path::Path::new(&f)),
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

    /// Refreshes the popup contents after the composer changed.
    pub fn refresh_popup(&mut self) {
        self.popup_selected = 0;
        self.file_matches.clear();
        if let Some((_, query)) = self.composer.token_at_cursor('@') {
            let query = query.to_string();
            let workspace = self.opts.workspace.clone();
            let index = self
                .file_index
                .get_or_insert_with(|| FileIndex::scan(&workspace));
            self.file_matches = index.search(&query);
        }
    }

    pub fn popup(&self) -> Popup {
        if let Some(list) = &self.session_picker {
            return Popup::Sessions(list.clone());
        }
        let text = self.composer.text();
        if let Some(rest) = text.strip_prefix('/')
            && !rest.contains(char::is_whitespace)
            && !rest.contains('/')
        {
            let matches = super::slash::matching_commands(rest);
            if !matches.is_empty() {
                return Popup::Slash(matches);
            }
        }
        if !self.file_matches.is_empty() && self.composer.token_at_cursor('@').is_some() {
            return Popup::Files(self.file_matches.clone());
        }
        Popup::None
    }
}
