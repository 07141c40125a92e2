//! The UI state and the user's submissions. Pure: no terminal, no channels — what the UI
//! wants done outside (send an op, open the editor, copy) is queued as an `Effect` for the
//! event loop. Tests drive it directly. Event handling lives in `app/events.rs`.

mod events;

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
use crate::protocol::{ApprovalPolicy, Choice, Event, Op, ToolStatus, TurnStatus};

/// Work for the event loop.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Op(Op),
    /// Suspend the terminal and edit the composer text in $VISUAL / $EDITOR.
    OpenEditor(String),
    /// Copy via OSC 52.
    Copy(String),
    SetMouseCapture(bool),
    /// Tell the user a long turn finished while they were elsewhere (OSC 9 and a bell).
    Notify(String),
}

/// What the popup above the composer shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Popup {
    None,
    Slash(Vec<super::slash::SlashEntry>),
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
    /// An undo (`false`) or redo (`true`) whose plan is on screen, waiting for y/n.
    pub pending_undo: Option<bool>,
    pub pager: Option<Pager>,
    pub popup_selected: usize,
    /// The session picker (/resume without an id) — the other popups derive from the composer.
    pub session_picker: Option<Vec<SessionEntry>>,
    pub file_index: Option<FileIndex>,
    pub file_matches: Vec<String>,
    /// The Ctrl+F search bar's text while it is open.
    pub search_input: Option<String>,
    /// The search bar was opened by `/` while scrolled up: Enter on the name of a command
    /// runs it (`/quit` typed from habit) instead of searching for the word.
    pub search_from_slash: bool,
    /// Messages typed while a turn runs, sent one by one as turns complete.
    pub queue: VecDeque<String>,
    pub effects: Vec<Effect>,
    pub now: Instant,
    pub last_ctrl_c: Option<Instant>,
    pub shutdown_started: Option<Instant>,
    /// Set when the UI should exit, with the exit code.
    pub exit: Option<i32>,
    pub mouse_capture: bool,
    /// Whether the terminal has the focus (its focus reports; assumed until one says otherwise).
    pub focused: bool,
    /// A short message in the footer (e.g. "press Ctrl+C again to quit").
    pub hint: Option<String>,
    /// A hint that is true only for a while ("press Ctrl+C again" lasts the double-press
    /// window): cleared at this instant by `expire_hint` if it is still the one shown.
    pub hint_until: Option<(Instant, String)>,
    pub session_id: Option<String>,
    pub session_file: Option<String>,
    /// Project instruction files (AGENTS.md …) the experts were given.
    pub instructions: Vec<String>,
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
        let mut warnings = opts.config_warnings.clone();
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
        let unsandboxed = opts.sandbox == "off";
        let approval = ApprovalPolicy::parse_name(&opts.approval);
        let mut app = App {
            session_file: opts.session_file.as_ref().map(|p| p.display().to_string()),
            instructions: Vec::new(),
            opts,
            theme,
            depth,
            generation: 0,
            expanded: false,
            transcript: Transcript::default(),
            composer: Composer::default(),
            history,
            status: StatusInfo {
                unsandboxed,
                approval,
                ..StatusInfo::default()
            },
            approvals: VecDeque::new(),
            pending_undo: None,
            pager: None,
            popup_selected: 0,
            session_picker: None,
            file_index: None,
            file_matches: Vec::new(),
            search_input: None,
            search_from_slash: false,
            queue: VecDeque::new(),
            effects: Vec::new(),
            now,
            last_ctrl_c: None,
            shutdown_started: None,
            exit: None,
            mouse_capture,
            focused: true,
            hint: None,
            hint_until: None,
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
        if let Some(device) = &o.device {
            body.push(format!("device     {device}"));
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
                Err(name) => {
                    match crate::config::commands::expand_command(trimmed, &self.opts.commands) {
                        Some(_) if self.status.working => self.queue.push_back(text),
                        Some(prompt) => self.start_turn(trimmed.to_string(), prompt),
                        None => self.push_notice(
                            NoticeLevel::Error,
                            format!("Unknown command {name}"),
                            vec!["/help lists the commands.".into()],
                        ),
                    }
                }
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
        self.start_turn(text.clone(), text);
    }

    /// Sends `text` as a user turn, shown in the transcript as `shown` (`/init` sends a long
    /// fixed prompt but shows the command the user typed).
    pub fn start_turn(&mut self, shown: String, text: String) {
        self.push_cell(CellKind::User(UserCell {
            text: shown,
            shell: false,
        }));
        // The core's TurnStarted carries the text sent; it is matched here, not drawn again.
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

    /// Shows `text` in the footer until `until`.
    pub fn hint_for(&mut self, text: &str, until: Instant) {
        self.hint = Some(text.to_string());
        self.hint_until = Some((until, text.to_string()));
    }

    /// When the UI must wake: to take a timed hint down, or to redraw an approval modal the
    /// moment it starts taking keys.
    pub fn next_deadline(&self) -> Option<Instant> {
        let hint = self.hint_until.as_ref().map(|(t, _)| *t);
        let arming = self
            .approvals
            .front()
            .and_then(|a| a.armed_at())
            .filter(|at| *at > self.now);
        match (hint, arming) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Called after each frame: the approval on screen counts as shown from now (its keys arm
    /// `ARMING_DELAY` later).
    pub fn frame_drawn(&mut self, now: Instant) {
        if let Some(a) = self.approvals.front_mut()
            && a.shown_at.is_none()
        {
            a.shown_at = Some(now);
        }
    }

    /// Takes down a timed hint whose time is up (it stays if another hint replaced it).
    /// Returns whether the screen changed.
    pub fn expire_hint(&mut self, now: Instant) -> bool {
        let Some((until, text)) = &self.hint_until else {
            return false;
        };
        if now < *until {
            return false;
        }
        let shown = self.hint.as_deref() == Some(text.as_str());
        if shown {
            self.hint = None;
        }
        self.hint_until = None;
        shown
    }

    pub fn request_quit(&mut self) {
        if self.shutdown_started.is_some() {
            return;
        }
        self.shutdown_started = Some(self.now);
        self.status.phase = Phase::ShuttingDown;
        self.send(Op::Shutdown);
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
            let matches = super::slash::matching_entries(rest, &self.opts.commands);
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
