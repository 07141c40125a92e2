//! The status line: what the agent is doing (MoL phase, spinner, "Esc to interrupt"), which expert
//! works and how it was chosen, the last turn's hop latencies, tokens and context use. Segments
//! have priorities; on a narrow terminal the least important ones are dropped first.

use std::time::{Duration, Instant};

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::cell::format_duration;
use super::options::ExpertNames;
use super::theme::Theme;
use super::wrap::str_width;
use crate::protocol::{ApprovalPolicy, Expert, Hop, RouteDecision, UsageTotals};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Phase {
    #[default]
    Idle,
    /// A turn was sent; no hop has started yet.
    Waiting,
    Routing,
    Answering,
    /// The answer hop streams reasoning before its text.
    Thinking,
    RunningTool(String),
    AwaitingApproval,
    Summarizing,
    Compacting,
    Interrupting,
    ShuttingDown,
}

impl Phase {
    pub fn label(&self) -> String {
        match self {
            Phase::Idle => "ready".into(),
            Phase::Waiting => "sending".into(),
            Phase::Routing => "routing".into(),
            Phase::Answering => "answering".into(),
            Phase::Thinking => "thinking".into(),
            Phase::RunningTool(t) => format!("running {t}"),
            Phase::AwaitingApproval => "waiting for approval".into(),
            Phase::Summarizing => "summarizing".into(),
            Phase::Compacting => "compacting".into(),
            Phase::Interrupting => "interrupting".into(),
            Phase::ShuttingDown => "saving session".into(),
        }
    }

    pub fn for_hop(hop: Hop) -> Phase {
        match hop {
            Hop::Route => Phase::Routing,
            Hop::Answer => Phase::Answering,
            Hop::Summary => Phase::Summarizing,
            Hop::Compaction => Phase::Compacting,
        }
    }
}

/// Hop timings of the last turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HopTimes {
    pub route_ms: Option<u64>,
    pub answer_ms: u64,
    pub answer_hops: u32,
    pub ttft_ms: Option<u64>,
    pub summary_ms: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct StatusInfo {
    pub phase: Phase,
    /// A user turn is running (input is queued, Esc interrupts).
    pub working: bool,
    pub turn_started: Option<Instant>,
    pub last_turn_ms: Option<u64>,
    pub expert: Option<Expert>,
    pub decision: Option<RouteDecision>,
    pub route_reason: Option<String>,
    pub pinned: Option<Expert>,
    pub hops: HopTimes,
    /// The session's tokens as the core counts them (every hop, across resume).
    pub usage: UsageTotals,
    pub context_used: Option<u64>,
    pub context_window: Option<u64>,
    /// Commands run without the sandbox (`--sandbox off`): always shown.
    pub unsandboxed: bool,
    /// When tool calls ask first; always shown (it changes at runtime: `/approvals`, Shift+Tab).
    pub approval: Option<ApprovalPolicy>,
}

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

pub fn short_count(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1}M", n as f64 / 1e6)
    } else if n >= 10_000 {
        format!("{}k", n / 1000)
    } else if n >= 1000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

pub fn decision_word(d: RouteDecision) -> &'static str {
    match d {
        RouteDecision::Model => "routed",
        RouteDecision::Fallback => "fallback",
        RouteDecision::Pinned => "pinned",
        RouteDecision::Sticky => "sticky",
        RouteDecision::FollowUp => "follow-up",
        RouteDecision::None => "direct",
    }
}

fn elapsed_text(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

/// Builds the status line for `width` columns.
pub fn status_line(
    info: &StatusInfo,
    experts: &ExpertNames,
    theme: &Theme,
    now: Instant,
    width: usize,
) -> Line<'static> {
    let p = &theme.colors;
    let base = Style::new().fg(p.status_fg).bg(p.status_bg);
    // (priority: lower is dropped first, spans)
    let mut segments: Vec<(u8, Vec<Span<'static>>)> = Vec::new();
    let active = info.working || !matches!(info.phase, Phase::Idle);
    if active {
        let since = info
            .turn_started
            .map(|t| now.saturating_duration_since(t))
            .unwrap_or_default();
        let frame = (since.as_millis() / 80) as usize % SPINNER.len();
        segments.push((
            9,
            vec![
                Span::styled(format!("{} ", SPINNER[frame]), base.fg(p.spinner)),
                Span::styled(
                    info.phase.label(),
                    base.fg(p.status_phase).add_modifier(Modifier::BOLD),
                ),
            ],
        ));
    } else {
        segments.push((9, vec![Span::styled("● ready", base.fg(p.tool_ok))]));
    }
    if info.unsandboxed {
        segments.push((
            10,
            vec![Span::styled(
                "⚠ sandbox off",
                base.fg(p.warning).add_modifier(Modifier::BOLD),
            )],
        ));
    }
    if let Some(policy) = info.approval {
        // Full-auto is the one that runs things unasked: it stands out like "sandbox off".
        let style = match policy {
            ApprovalPolicy::FullAuto => base.fg(p.warning).add_modifier(Modifier::BOLD),
            _ => base,
        };
        segments.push((
            10,
            vec![Span::styled(
                format!("approvals {}", policy.as_str()),
                style,
            )],
        ));
    }
    if let Some(expert) = info.expert.or(info.pinned) {
        let color = match expert {
            Expert::L0 => p.expert_l0,
            Expert::L1 => p.expert_l1,
            Expert::L2 => p.expert_l2,
            Expert::L3 => p.expert_l3,
        };
        let name = experts.name(expert);
        let mut spans = vec![Span::styled(
            format!("{expert} {name}").trim_end().to_string(),
            base.fg(color).add_modifier(Modifier::BOLD),
        )];
        let how = if info.pinned.is_some() && info.expert.is_none() {
            Some(RouteDecision::Pinned)
        } else {
            info.decision
        };
        if let Some(d) = how {
            spans.push(Span::styled(format!(" ({})", decision_word(d)), base));
        }
        segments.push((8, spans));
    }
    if active && info.working {
        let since = info
            .turn_started
            .map(|t| now.saturating_duration_since(t))
            .unwrap_or_default();
        segments.push((7, vec![Span::styled(elapsed_text(since), base)]));
        // In the approval modal Esc answers "no"; it interrupts only outside it.
        if info.phase != Phase::AwaitingApproval {
            segments.push((8, vec![Span::styled("Esc to interrupt", base.fg(p.dim))]));
        }
    } else if let Some(ms) = info.last_turn_ms {
        segments.push((
            3,
            vec![Span::styled(format!("turn {}", format_duration(ms)), base)],
        ));
    }
    let h = &info.hops;
    if let Some(ms) = h.route_ms {
        segments.push((
            6,
            vec![Span::styled(format!("route {}", format_duration(ms)), base)],
        ));
    }
    if h.answer_hops > 0 {
        let count = if h.answer_hops > 1 {
            format!("×{}", h.answer_hops)
        } else {
            String::new()
        };
        segments.push((
            6,
            vec![Span::styled(
                format!("answer {}{count}", format_duration(h.answer_ms)),
                base,
            )],
        ));
    }
    if let Some(ms) = h.summary_ms {
        segments.push((
            4,
            vec![Span::styled(
                format!("summary {}", format_duration(ms)),
                base,
            )],
        ));
    }
    let tokens = info.usage.total;
    if tokens.prompt_tokens + tokens.completion_tokens > 0 {
        segments.push((
            4,
            vec![Span::styled(
                format!(
                    "↑{} ↓{}",
                    short_count(tokens.prompt_tokens),
                    short_count(tokens.completion_tokens)
                ),
                base,
            )],
        ));
    }
    if let Some(used) = info.context_used {
        let text = match info.context_window {
            Some(w) if w > 0 => format!(
                "ctx {}/{} {}%",
                short_count(used),
                short_count(w),
                used * 100 / w
            ),
            _ => format!("ctx {}", short_count(used)),
        };
        segments.push((5, vec![Span::styled(text, base)]));
    }

    let sep_w = 3;
    let seg_w = |s: &Vec<Span<'static>>| s.iter().map(|x| str_width(&x.content)).sum::<usize>();
    let total = |segs: &Vec<(u8, Vec<Span<'static>>)>| {
        segs.iter().map(|(_, s)| seg_w(s)).sum::<usize>() + sep_w * segs.len().saturating_sub(1) + 2
    };
    while total(&segments) > width && segments.len() > 1 {
        let Some((i, _)) = segments
            .iter()
            .enumerate()
            .min_by_key(|(i, (prio, _))| (*prio, usize::MAX - i))
        else {
            break;
        };
        segments.remove(i);
    }
    let mut spans = vec![Span::styled(" ", base)];
    for (i, (_, seg)) in segments.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(" · ", base.fg(p.dim)));
        }
        spans.extend(seg);
    }
    let used: usize = spans.iter().map(|s| str_width(&s.content)).sum();
    if used < width {
        spans.push(Span::styled(" ".repeat(width - used), base));
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::ColorDepth;

    fn text(info: &StatusInfo) -> String {
        let theme = crate::tui::Theme::default_for(ColorDepth::TrueColor);
        status_line(info, &ExpertNames::defaults(), &theme, Instant::now(), 100)
            .spans
            .iter()
            .map(|s| s.content.to_string())
            .collect()
    }

    #[test]
    fn running_without_the_sandbox_is_always_marked() {
        let mut info = StatusInfo::default();
        assert!(!text(&info).contains("sandbox off"));
        info.unsandboxed = true;
        assert!(text(&info).contains("⚠ sandbox off"));
    }

    #[test]
    fn the_approval_policy_is_always_shown() {
        let mut info = StatusInfo {
            approval: Some(ApprovalPolicy::AutoEdit),
            ..StatusInfo::default()
        };
        let theme = crate::tui::Theme::default_for(ColorDepth::TrueColor);
        info.expert = Some(Expert::L2);
        info.hops.route_ms = Some(120);
        let narrow: String =
            status_line(&info, &ExpertNames::defaults(), &theme, Instant::now(), 30)
                .spans
                .iter()
                .map(|s| s.content.to_string())
                .collect();
        assert!(narrow.contains("approvals auto-edit"), "{narrow}");
        assert!(!narrow.contains("route"), "{narrow}");
    }
}
