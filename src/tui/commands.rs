//! What each slash command does.

use super::app::{App, Effect};
use super::cell::NoticeLevel;
use super::sessions::{describe, list_sessions};
use super::slash::SlashCommand;
use super::status::{decision_word, short_count};
use super::theme::{Theme, available_themes};
use crate::protocol::{ApprovalPolicy, Choice, Expert, Op};

/// The footer hint while `/compact` waits for the core; cleared by the answer, whichever it is.
pub const COMPACTING_HINT: &str = "compacting the context…";

/// The user turn `/init` sends: the expert drafts AGENTS.md and writes it with `write_file`,
/// which asks for approval like any edit (the user sees the diff first).
pub const INIT_PROMPT: &str = "Write an AGENTS.md for this repository: the instructions a coding \
agent needs to work here. First look around: list the top folders, read the README, the build \
files (Cargo.toml, package.json, pyproject.toml, go.mod, Makefile…), the CI configuration and a \
few central source files. Then create AGENTS.md at the workspace root with write_file, in \
Markdown, at most about 150 lines: what the project is; its layout (which folder holds what); \
how to build, run the tests and lint it, with the exact commands; the code style and \
conventions you saw; what a newcomer must not break. Write only what you verified in the \
files; never invent a command. Change no other file.";

/// The policies Shift+Tab cycles through, in order (`never` is for runs nobody watches).
const APPROVAL_CYCLE: [ApprovalPolicy; 3] = [
    ApprovalPolicy::Ask,
    ApprovalPolicy::AutoEdit,
    ApprovalPolicy::FullAuto,
];

/// The keys, for /help.
pub const KEY_HELP: &[(&str, &str)] = &[
    ("Enter", "send (queued while the agent works)"),
    ("Shift+Enter, Ctrl+J", "new line"),
    (
        "Up / Down",
        "move in the prompt; history at the first/last line",
    ),
    ("Esc", "interrupt the running turn; close a popup"),
    ("Ctrl+C", "interrupt; twice within a second quits"),
    ("Ctrl+D", "quit (empty prompt)"),
    (
        "PgUp / PgDn, wheel",
        "scroll the transcript; End returns to the bottom",
    ),
    (
        "Ctrl+F",
        "search the transcript (Enter older, Ctrl+N newer)",
    ),
    ("Shift+Tab", "cycle approvals: ask → auto-edit → full-auto"),
    ("Ctrl+O", "expand tool output and reasoning"),
    ("Ctrl+G", "edit the prompt in $EDITOR"),
    (
        "F2",
        "mouse capture on/off (off: select and copy with the mouse)",
    ),
    ("@path", "fuzzy file completion (Tab accepts)"),
    ("!cmd", "run a shell command in the sandbox"),
];

impl App {
    pub fn run_slash(&mut self, cmd: SlashCommand, args: &str) {
        match cmd {
            SlashCommand::Help => {
                let mut body: Vec<String> = SlashCommand::ALL
                    .iter()
                    .map(|c| {
                        let usage = if c.usage().is_empty() {
                            format!("/{}", c.name())
                        } else {
                            c.usage().to_string()
                        };
                        format!("{usage:<22} {}", c.description())
                    })
                    .collect();
                let custom: Vec<String> = self
                    .opts
                    .commands
                    .iter()
                    .filter(|c| SlashCommand::from_name(&c.name).is_none())
                    .map(|c| format!("{:<22} {}", c.usage(), c.description))
                    .collect();
                if !custom.is_empty() {
                    body.push(String::new());
                    body.push(
                        "Custom commands (.baton/commands, ~/.config/baton/commands):".into(),
                    );
                    body.extend(custom);
                }
                body.push(String::new());
                body.extend(KEY_HELP.iter().map(|(k, d)| format!("{k:<22} {d}")));
                self.push_notice(NoticeLevel::Info, "Commands and keys", body);
            }
            SlashCommand::New => {
                // The token total of the new session comes from the core.
                self.send(Op::NewSession);
                self.status.context_used = None;
                self.forget_last_turn();
                self.push_notice(
                    NoticeLevel::Info,
                    "Starting a new session",
                    vec!["The transcript above stays for reference.".into()],
                );
            }
            SlashCommand::Resume => {
                if args.is_empty() {
                    self.open_session_picker();
                } else {
                    self.resume(args.to_string());
                }
            }
            SlashCommand::Rename => {
                self.send(Op::RenameSession {
                    name: args.to_string(),
                });
                let title = if args.is_empty() {
                    "Session name cleared".to_string()
                } else {
                    format!("Session named {args}")
                };
                self.push_notice(NoticeLevel::Info, title, vec![]);
            }
            SlashCommand::Sessions => match self.list_saved_sessions() {
                Some(Ok(list)) if !list.is_empty() => {
                    let ids = super::sessions::short_ids(&list);
                    let body = list
                        .iter()
                        .zip(&ids)
                        .map(|(s, id)| {
                            let (about, detail) = describe(s, &self.opts.workspace, id);
                            format!("{}  {about}  ({detail})", s.id)
                        })
                        .collect();
                    self.push_notice(
                        NoticeLevel::Info,
                        format!("{} saved sessions (/resume ID)", list.len()),
                        body,
                    );
                }
                Some(Ok(_)) => self.push_notice(NoticeLevel::Info, "No saved sessions yet", vec![]),
                Some(Err(e)) => self.push_notice(NoticeLevel::Error, e, vec![]),
                None => self.push_notice(
                    NoticeLevel::Warning,
                    "No sessions directory is configured",
                    vec![],
                ),
            },
            SlashCommand::Expert => self.pin_expert(args),
            SlashCommand::Mode => {
                let body = vec![
                    "mol: client-side routing over L0–L3; proxy: the server routes; single: one model.".into(),
                    "The mode is chosen at start: baton --mode mol|proxy|single.".into(),
                ];
                self.push_notice(NoticeLevel::Info, format!("Mode: {}", self.opts.mode), body);
            }
            SlashCommand::Model => self.model_command(args),
            SlashCommand::Approvals => self.approvals_command(args),
            SlashCommand::Undo => self.send(Op::Undo {
                redo: false,
                apply: false,
                force: false,
            }),
            SlashCommand::Redo => self.send(Op::Undo {
                redo: true,
                apply: false,
                force: false,
            }),
            SlashCommand::Diff => self.send(Op::WorkspaceDiff),
            SlashCommand::Mcp => self.send(Op::McpStatus),
            SlashCommand::Status => self.show_status(),
            SlashCommand::Compact => {
                self.send(Op::Compact);
                self.hint = Some(COMPACTING_HINT.into());
            }
            SlashCommand::Init => self.init_agents_md(),
            SlashCommand::Copy => match self.last_answer.clone() {
                Some(text) => {
                    self.effects.push(Effect::Copy(text));
                    self.hint = Some("last answer sent to the clipboard (OSC 52); if nothing arrived, press F2 and select with the mouse".into());
                }
                None => self.push_notice(
                    NoticeLevel::Warning,
                    "Nothing to copy yet: no answer in this session",
                    vec![],
                ),
            },
            SlashCommand::Theme => self.switch_theme(args),
            SlashCommand::Mouse => self.toggle_mouse(),
            SlashCommand::Quit => self.request_quit(),
        }
    }

    /// `/model`: shows or sets the model name in proxy and single modes. In mol mode there
    /// is no one model to set — the route hop picks an expert per turn — so a name is refused
    /// rather than accepted and ignored.
    fn model_command(&mut self, args: &str) {
        if self.opts.mode == "mol" {
            let title = if args.is_empty() {
                "Model: routing picks the expert for each turn (mol mode)".to_string()
            } else {
                format!("/model {args} does nothing in mol mode: routing picks the expert")
            };
            self.push_notice(
                NoticeLevel::Info,
                title,
                vec![
                    "Each turn goes to the expert (L0–L3) the route hop chooses.".into(),
                    "/expert L2 pins an expert for every turn; /expert auto lets routing choose again.".into(),
                    "/model NAME works in proxy and single modes (baton --mode proxy|single).".into(),
                ],
            );
            return;
        }
        if args.is_empty() {
            let current = self
                .opts
                .model
                .clone()
                .unwrap_or_else(|| "(set by the server or profile)".into());
            self.push_notice(
                NoticeLevel::Info,
                format!("Model: {current}"),
                vec!["/model NAME switches.".into()],
            );
        } else {
            self.opts.model = Some(args.to_string());
            self.send(Op::SetModel {
                model: args.to_string(),
            });
            self.push_notice(NoticeLevel::Info, format!("Model set to {args}"), vec![]);
        }
    }

    /// `/approvals [POLICY]`: shows the policy, or asks the core to change it; the status line
    /// follows the core's `ApprovalPolicyChanged`.
    fn approvals_command(&mut self, args: &str) {
        if args.is_empty() {
            let current = self
                .status
                .approval
                .map(|p| p.as_str())
                .unwrap_or("(default)");
            let body = ApprovalPolicy::ALL
                .iter()
                .map(|p| format!("{:<10} {}", p.as_str(), p.help()))
                .collect();
            self.push_notice(
                NoticeLevel::Info,
                format!("Approvals: {current} (/approvals NAME switches, Shift+Tab cycles)"),
                body,
            );
            return;
        }
        match ApprovalPolicy::parse_or_list(args) {
            Ok(policy) => self.set_approval_policy(policy),
            Err(e) => self.push_notice(
                NoticeLevel::Error,
                format!("'{args}' is not an approval policy"),
                vec![e.to_string()],
            ),
        }
    }

    /// `/init`: a turn that drafts AGENTS.md, unless the workspace has one (it is never
    /// overwritten from here).
    fn init_agents_md(&mut self) {
        let path = self.opts.workspace.join("AGENTS.md");
        if path.exists() {
            self.push_notice(
                NoticeLevel::Info,
                "AGENTS.md already exists in this workspace",
                vec![
                    "Every expert is given it. Edit it by hand, or ask for changes in a message."
                        .into(),
                ],
            );
            return;
        }
        self.start_turn("/init".into(), INIT_PROMPT.into());
    }

    /// Shift+Tab: the next policy of the cycle.
    pub fn cycle_approval_policy(&mut self) {
        let current = self.status.approval.unwrap_or_default();
        let next = APPROVAL_CYCLE
            .iter()
            .position(|p| *p == current)
            .map(|i| APPROVAL_CYCLE[(i + 1) % APPROVAL_CYCLE.len()])
            .unwrap_or(ApprovalPolicy::Ask);
        self.set_approval_policy(next);
    }

    fn set_approval_policy(&mut self, policy: ApprovalPolicy) {
        // Shown at once so a second Shift+Tab cycles from here; the core's event confirms it.
        self.status.approval = Some(policy);
        self.send(Op::SetApprovalPolicy { policy });
    }

    /// `/new` and `/resume`: the last turn's expert, route and timings belong to the old
    /// session.
    pub(super) fn forget_last_turn(&mut self) {
        let s = &mut self.status;
        s.hops = Default::default();
        s.last_turn_ms = None;
        s.route_reason = None;
        s.expert = s.pinned;
        s.decision = s.pinned.map(|_| crate::protocol::RouteDecision::Pinned);
    }

    pub fn toggle_mouse(&mut self) {
        self.mouse_capture = !self.mouse_capture;
        self.effects
            .push(Effect::SetMouseCapture(self.mouse_capture));
        self.hint = Some(if self.mouse_capture {
            "mouse capture on: the wheel scrolls; Shift+drag selects in most terminals".into()
        } else {
            "mouse capture off: drag to select and copy; PgUp/PgDn scroll".into()
        });
    }

    fn sessions_dir(&self) -> Option<std::path::PathBuf> {
        self.opts.sessions_dir.clone().or_else(|| {
            let file = self.session_file.as_ref()?;
            std::path::Path::new(file).parent().map(|p| p.to_path_buf())
        })
    }

    fn list_saved_sessions(&self) -> Option<Result<Vec<super::sessions::SessionEntry>, String>> {
        let dir = self.sessions_dir()?;
        Some(list_sessions(&dir, &self.opts.workspace))
    }

    fn open_session_picker(&mut self) {
        match self.list_saved_sessions() {
            Some(Ok(list)) if !list.is_empty() => {
                self.session_picker = Some(list);
                self.popup_selected = 0;
            }
            Some(Ok(_)) => {
                self.push_notice(NoticeLevel::Info, "No saved sessions to resume", vec![])
            }
            Some(Err(e)) => self.push_notice(NoticeLevel::Error, e, vec![]),
            None => self.push_notice(
                NoticeLevel::Warning,
                "No sessions directory is configured",
                vec![],
            ),
        }
    }

    pub fn resume(&mut self, id: String) {
        self.session_picker = None;
        self.push_notice(NoticeLevel::Info, format!("Resuming session {id}…"), vec![]);
        self.send(Op::ResumeSession { id });
    }

    fn pin_expert(&mut self, args: &str) {
        let arg = args.trim();
        if arg.is_empty() {
            let current = match self.status.pinned {
                Some(e) => format!("{e} {} is pinned", self.opts.experts.name(e)),
                None => "routing picks the expert for each turn".into(),
            };
            let body = Expert::ALL
                .iter()
                .map(|e| format!("{e}  {}", self.opts.experts.name(*e)))
                .collect();
            self.push_notice(
                NoticeLevel::Info,
                format!("Expert: {current} (/expert L2 pins, /expert auto unpins)"),
                body,
            );
            return;
        }
        if matches!(
            arg.to_ascii_lowercase().as_str(),
            "auto" | "off" | "none" | "unpin"
        ) {
            self.status.pinned = None;
            // The status line must not keep saying "(pinned)" about an expert routing no
            // longer goes around; a running pinned turn keeps its label until it ends.
            if self.status.decision == Some(crate::protocol::RouteDecision::Pinned)
                && !self.status.working
            {
                self.status.decision = None;
                self.status.expert = None;
            }
            self.send(Op::PinExpert { expert: None });
            self.push_notice(
                NoticeLevel::Info,
                "Expert unpinned: routing chooses again",
                vec![],
            );
            return;
        }
        // Accept a label or a display name from the profile ("coding").
        let by_name = Expert::ALL
            .into_iter()
            .find(|e| self.opts.experts.name(*e).eq_ignore_ascii_case(arg));
        match Expert::parse(arg).or(by_name) {
            Some(e) => {
                self.status.pinned = Some(e);
                self.status.expert = Some(e);
                self.status.decision = Some(crate::protocol::RouteDecision::Pinned);
                self.send(Op::PinExpert { expert: Some(e) });
                self.push_notice(
                    NoticeLevel::Info,
                    format!(
                        "Pinned {e} {}: every turn goes to it without routing",
                        self.opts.experts.name(e)
                    ),
                    vec![],
                );
            }
            None => self.push_notice(
                NoticeLevel::Error,
                format!("'{arg}' is not an expert"),
                vec!["Use L0, L1, L2, L3, a name from the profile, or auto.".into()],
            ),
        }
    }

    fn show_status(&mut self) {
        let o = &self.opts;
        let s = &self.status;
        let expert = match s.expert {
            Some(e) => format!(
                "{e} {}{}",
                o.experts.name(e),
                s.decision
                    .map(|d| format!(" ({})", decision_word(d)))
                    .unwrap_or_default()
            ),
            None => "none yet".into(),
        };
        let ctx = match (s.context_used, s.context_window) {
            (Some(u), Some(w)) if w > 0 => format!(
                "{} of {} ({}%)",
                short_count(u),
                short_count(w),
                u * 100 / w
            ),
            (Some(u), _) => short_count(u),
            _ => "unknown".into(),
        };
        let or_unset = |v: &str| {
            if v.is_empty() {
                "(default)".to_string()
            } else {
                v.to_string()
            }
        };
        let body = vec![
            format!("endpoint   {}", or_unset(&o.endpoint)),
            format!("mode       {}", o.mode),
            format!(
                "device     {}",
                o.device
                    .clone()
                    .unwrap_or_else(|| "remote (the server's)".into())
            ),
            format!("profile    {}", o.profile),
            format!(
                "model      {}",
                o.model.clone().unwrap_or_else(|| if o.mode == "mol" {
                    // In mol mode each hop names its expert as the model.
                    "L0–L3 (each hop asks for its expert by name)".into()
                } else {
                    "(server default)".into()
                })
            ),
            format!("sandbox    {}", or_unset(&o.sandbox)),
            format!(
                "approval   {}",
                s.approval
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_else(|| or_unset(&o.approval))
            ),
            format!("expert     {expert}"),
            format!(
                "pinned     {}",
                s.pinned
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "no".into())
            ),
            format!(
                "tokens     {} in, {} out this session",
                s.usage.total.prompt_tokens, s.usage.total.completion_tokens
            ),
            format!("  by hop   {}", by_hop(&s.usage)),
            format!("context    {ctx}"),
            format!(
                "session    {}",
                self.session_id
                    .clone()
                    .unwrap_or_else(|| "(not started)".into())
            ),
            format!(
                "file       {}",
                self.session_file
                    .clone()
                    .unwrap_or_else(|| "(not saved)".into())
            ),
            format!("workspace  {}", o.workspace.display()),
            format!(
                "AGENTS.md  {}",
                if self.instructions.is_empty() {
                    "none found".to_string()
                } else {
                    self.instructions.join(", ")
                }
            ),
            format!("theme      {}", self.theme.name),
        ];
        self.push_notice(NoticeLevel::Info, "Status", body);
    }

    fn switch_theme(&mut self, args: &str) {
        let names = available_themes(self.opts.config_dir.as_deref());
        if args.is_empty() {
            self.push_notice(
                NoticeLevel::Info,
                format!(
                    "Theme: {} (available: {})",
                    self.theme.name,
                    names.join(", ")
                ),
                vec![
                    "/theme NAME switches; user themes live in <config dir>/themes/NAME.toml."
                        .into(),
                ],
            );
            return;
        }
        match Theme::load(args, self.opts.config_dir.as_deref(), self.depth) {
            Ok(theme) => {
                self.hint = Some(format!("theme: {}", theme.name));
                self.set_theme(theme);
            }
            Err(e) => self.push_notice(
                NoticeLevel::Error,
                e.to_string(),
                vec![format!("available: {}", names.join(", "))],
            ),
        }
    }
}

/// `route 1.2k · answer 8k · summary 300 · compaction 0` (in + out tokens of each hop).
fn by_hop(usage: &crate::protocol::UsageTotals) -> String {
    use crate::protocol::Hop;
    [Hop::Route, Hop::Answer, Hop::Summary, Hop::Compaction]
        .iter()
        .map(|&hop| {
            let u = usage.hop(hop);
            let n = u.prompt_tokens + u.completion_tokens;
            format!("{hop} {}", short_count(n))
        })
        .collect::<Vec<_>>()
        .join(" · ")
}
