//! How each protocol event from the core changes the UI state.

use super::*;

impl App {
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

    /// `/compact` was answered (done, refused or failed): "compacting…" is no longer true.
    fn clear_compacting_hint(&mut self) {
        if self.hint.as_deref() == Some(crate::tui::commands::COMPACTING_HINT) {
            self.hint = None;
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

    /// Applies one event from the core.
    pub fn handle_event(&mut self, event: Event) {
        match event {
            Event::Session {
                session_id,
                mode,
                backend,
                resumed,
                session_file,
                instructions,
                ..
            } => {
                self.instructions = instructions;
                self.opts.mode = mode;
                if !backend.is_empty() {
                    self.opts.endpoint = backend;
                }
                if let Some(f) = session_file {
                    self.session_file = Some(f);
                }
                if resumed {
                    // The last turn's expert, route and timings were the other session's.
                    if self.session_id.is_some() {
                        self.forget_last_turn();
                    }
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
            // The status line follows the hops the turn keeps: a speculative answer shows as
            // answering once the route has confirmed it (its `hop_started` comes then).
            Event::SpeculationStarted { .. } | Event::SpeculationResolved { .. } => {}
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
            Event::FileDiff {
                call_id,
                path,
                diff,
            } => {
                // The `±` cell draws the diff; the tool's own cell then shows only its summary.
                self.set_tool_cell(&call_id, |t| t.diff_shown = true);
                self.push_cell(CellKind::Diff(DiffCell { path, diff }));
            }
            Event::PlanUpdated { items } => {
                self.push_cell(CellKind::Plan(PlanCell { items }));
            }
            Event::ApprovalRequested { call_id, request } => {
                self.status.phase = Phase::AwaitingApproval;
                self.set_tool_cell(&call_id, |t| t.awaiting_approval = true);
                self.approvals
                    .push_back(PendingApproval::new(call_id, request));
            }
            Event::SummaryRecorded { latency_ms, .. } => {
                self.status.hops.summary_ms = Some(latency_ms);
                if !self.status.working && matches!(self.status.phase, Phase::Summarizing) {
                    self.status.phase = Phase::Idle;
                }
            }
            Event::SessionUsage { usage } => self.status.usage = usage,
            Event::Usage {
                context_used,
                context_window,
                ..
            } => {
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
                self.clear_compacting_hint();
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
            Event::UndoPlanned {
                redo,
                lines,
                actionable,
            } => {
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
            Event::UndoCompleted {
                restored,
                removed,
                kept,
                redo,
            } => {
                let what = if redo { "Redo" } else { "Undo" };
                let changed = !restored.is_empty() || !removed.is_empty();
                let mut body: Vec<String> =
                    restored.iter().map(|f| format!("restored {f}")).collect();
                body.extend(removed.iter().map(|f| format!("removed  {f}")));
                body.extend(kept.iter().map(|f| format!("kept     {f}")));
                let title = match (changed, redo) {
                    (false, _) => format!("{what}: nothing to restore"),
                    (true, false) => "Undo: files restored (/redo reverts this)".to_string(),
                    (true, true) => "Redo: the undone changes are back".to_string(),
                };
                self.push_notice(NoticeLevel::Info, title, body);
            }
            Event::WorkspaceDiff { diff, error, .. } => self.show_workspace_diff(diff, error),
            Event::McpServers { servers } => self.show_mcp_servers(&servers),
            Event::Warning { message } => {
                self.clear_compacting_hint();
                self.push_notice(NoticeLevel::Warning, message, vec![]);
            }
            Event::ApprovalPolicyChanged { policy } => {
                self.status.approval = Some(policy);
                self.opts.approval = policy.as_str().to_string();
                self.hint = Some(format!(
                    "approvals: {} — {} (Shift+Tab cycles)",
                    policy.as_str(),
                    policy.help()
                ));
            }
            Event::Error { message, kind, hop } => {
                self.clear_compacting_hint();
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
                if let Some(a) = advice_for(kind, &self.opts.endpoint, self.opts.mode == "mol") {
                    body.push(a);
                }
                self.push_notice(NoticeLevel::Error, message, body);
            }
            Event::TurnCompleted {
                status,
                duration_ms,
                answer,
                expert,
                session_usage,
                ..
            } => {
                self.status.usage = *session_usage;
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
                // Unpinned while this pinned turn ran: the next turn is routed again.
                if self.status.pinned.is_none()
                    && self.status.decision == Some(crate::protocol::RouteDecision::Pinned)
                {
                    self.status.decision = None;
                }
                self.status.working = false;
                self.status.last_turn_ms = Some(duration_ms);
                if !self.focused
                    && self
                        .opts
                        .notify_after
                        .is_some_and(|after| duration_ms >= after.as_millis() as u64)
                {
                    let how = match status {
                        TurnStatus::Done => "finished",
                        TurnStatus::Interrupted => "was interrupted",
                        TurnStatus::LimitReached => "reached its limit",
                        TurnStatus::Error => "failed",
                    };
                    self.effects.push(Effect::Notify(format!(
                        "baton: the turn {how} after {}",
                        crate::tui::cell::format_duration(duration_ms)
                    )));
                }
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

    /// `/diff`'s answer: the pager over the diff, or a notice when there is nothing to page.
    /// `/mcp`: one line per server (state, tool count, command or URL), its tools and its
    /// last error below it.
    fn show_mcp_servers(&mut self, servers: &[crate::protocol::McpServerStatus]) {
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

    fn show_workspace_diff(&mut self, diff: String, error: Option<String>) {
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
    fn show_resumed(&mut self, session_id: &str) {
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
