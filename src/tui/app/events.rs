//! How each protocol event from the core changes the UI state: [`App::handle_event`] hands
//! each to its handler; the session, turn and status ones are here, the transcript's cells in
//! `transcript`, the answers to the user's commands in `answers`.

mod answers;
mod transcript;

use super::*;
use crate::protocol::{ApprovalPolicy, ErrorKind, Expert, Hop, RouteDecision, UsageTotals};

impl App {
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
            } => self.on_session(
                session_id,
                mode,
                backend,
                resumed,
                session_file,
                instructions,
            ),
            Event::TurnStarted { text, .. } => self.on_turn_started(text),
            Event::HopStarted { hop, expert, .. } => self.on_hop_started(hop, expert),
            // The status line follows the hops the turn keeps: a speculative answer shows as
            // answering once the route has confirmed it (its `hop_started` comes then).
            Event::SpeculationStarted { .. } | Event::SpeculationResolved { .. } => {}
            Event::HopCompleted {
                hop,
                latency_ms,
                ttft_ms,
                ..
            } => self.on_hop_completed(hop, latency_ms, ttft_ms),
            Event::RouteDecided {
                expert,
                decision,
                reason,
                latency_ms,
                ..
            } => self.on_route_decided(expert, decision, reason, latency_ms),
            Event::ReasoningDelta { delta, .. } => self.on_reasoning_delta(delta),
            Event::MessageDelta { delta, expert, .. } => self.on_message_delta(delta, expert),
            Event::MessageFinal { text, expert, .. } => self.on_message_final(text, expert),
            Event::ToolBegin {
                call_id,
                tool,
                title,
                ..
            } => self.on_tool_begin(call_id, tool, title),
            Event::ToolOutput { call_id, chunk } => self.on_tool_output(call_id, chunk),
            Event::ToolEnd {
                call_id,
                status,
                exit_code,
                duration_ms,
                output,
            } => self.on_tool_end(call_id, status, exit_code, duration_ms, output),
            Event::FileDiff {
                call_id,
                path,
                diff,
            } => self.on_file_diff(call_id, path, diff),
            Event::PlanUpdated { items } => {
                self.push_cell(CellKind::Plan(PlanCell { items }));
            }
            Event::ApprovalRequested { call_id, request } => {
                self.on_approval_requested(call_id, request)
            }
            Event::SummaryRecorded {
                latency_ms, tokens, ..
            } => self.on_summary_recorded(latency_ms, tokens),
            Event::SessionUsage { usage } => self.status.usage = usage,
            Event::Usage {
                context_used,
                context_window,
                ..
            } => self.on_usage(context_used, context_window),
            Event::ContextCompacted {
                expert,
                tokens_before,
                tokens_after,
                method,
            } => self.on_context_compacted(expert, tokens_before, tokens_after, method),
            Event::UndoPlanned {
                redo,
                lines,
                actionable,
            } => self.on_undo_planned(redo, lines, actionable),
            Event::UndoCompleted {
                restored,
                removed,
                kept,
                redo,
            } => self.on_undo_completed(restored, removed, kept, redo),
            Event::WorkspaceDiff { diff, error, .. } => self.show_workspace_diff(diff, error),
            Event::McpServers { servers } => self.show_mcp_servers(&servers),
            Event::Warning { message } => {
                self.clear_compacting_hint();
                self.push_notice(NoticeLevel::Warning, message, vec![]);
            }
            Event::ApprovalPolicyChanged { policy } => self.on_approval_policy_changed(policy),
            Event::Error { message, kind, hop } => self.on_error(message, kind, hop),
            Event::TurnCompleted {
                status,
                duration_ms,
                answer,
                expert,
                session_usage,
                ..
            } => self.on_turn_completed(status, duration_ms, answer, expert, *session_usage),
            Event::ShutdownComplete => {
                self.exit = Some(0);
            }
        }
    }

    /// `/compact` was answered (done, refused or failed): "compacting…" is no longer true.
    fn clear_compacting_hint(&mut self) {
        if self.hint.as_deref() == Some(crate::tui::commands::COMPACTING_HINT) {
            self.hint = None;
        }
    }

    fn on_session(
        &mut self,
        session_id: String,
        mode: String,
        backend: String,
        resumed: bool,
        session_file: Option<String>,
        instructions: Vec<String>,
    ) {
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

    fn on_turn_started(&mut self, text: String) {
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

    fn on_hop_started(&mut self, hop: Hop, expert: Option<Expert>) {
        if matches!(self.status.phase, Phase::ShuttingDown) {
            return;
        }
        self.status.phase = Phase::for_hop(hop);
        if hop == crate::protocol::Hop::Answer && expert.is_some() {
            self.status.expert = expert;
        }
    }

    fn on_hop_completed(&mut self, hop: Hop, latency_ms: u64, ttft_ms: Option<u64>) {
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

    fn on_route_decided(
        &mut self,
        expert: Expert,
        decision: RouteDecision,
        reason: Option<String>,
        latency_ms: u64,
    ) {
        self.status.expert = Some(expert);
        self.status.decision = Some(decision);
        self.status.route_reason = reason.clone();
        if decision == crate::protocol::RouteDecision::Model && self.status.hops.route_ms.is_none()
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

    fn on_summary_recorded(&mut self, latency_ms: u64, tokens: u64) {
        // A short L0 answer that is its own summary took no hop: no summary time to show.
        if latency_ms > 0 || tokens > 0 {
            self.status.hops.summary_ms = Some(latency_ms);
        }
        if !self.status.working && matches!(self.status.phase, Phase::Summarizing) {
            self.status.phase = Phase::Idle;
        }
    }

    fn on_usage(&mut self, context_used: Option<u64>, context_window: Option<u64>) {
        if context_used.is_some() {
            self.status.context_used = context_used;
        }
        if context_window.is_some() {
            self.status.context_window = context_window;
        }
    }

    fn on_context_compacted(
        &mut self,
        expert: Expert,
        tokens_before: u64,
        tokens_after: u64,
        method: String,
    ) {
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

    fn on_approval_policy_changed(&mut self, policy: ApprovalPolicy) {
        self.status.approval = Some(policy);
        self.opts.approval = policy.as_str().to_string();
        self.hint = Some(format!(
            "approvals: {} — {} (Shift+Tab cycles)",
            policy.as_str(),
            policy.help()
        ));
    }

    fn on_error(&mut self, message: String, kind: ErrorKind, hop: Option<Hop>) {
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

    fn on_turn_completed(
        &mut self,
        status: TurnStatus,
        duration_ms: u64,
        answer: Option<String>,
        expert: Option<Expert>,
        session_usage: UsageTotals,
    ) {
        self.status.usage = session_usage;
        self.finish_streams();
        // Tool cells still marked running were cut off by the end of the turn.
        let running: Vec<usize> = self.tool_cells.drain().map(|(_, i)| i).collect();
        for i in running {
            if let Some(CellKind::Tool(t)) = self.transcript.cells.get(i).map(HistoryCell::kind)
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
}
