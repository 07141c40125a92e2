//! Executing the model's tool calls: unknown names and bad arguments become results the model
//! can read, the approval policy decides, events report begin/output/end.

use std::time::Instant;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::approval::{self, Verdict};
use super::{Shared, hooks, lock};
use crate::hooks::{HookEvent, HookOutcome, Permission};
use crate::protocol::{ApprovalDecision, ApprovalRequest, Event, ToolStatus};
use crate::protocol::{ChatMessage, Expert, ToolCall};
use crate::tool::{ApprovalNeed, ToolContext, ToolResult};

/// What a call's hooks said beyond its result: `continue: false` stops the turn.
pub(crate) struct Executed {
    pub message: ChatMessage,
    /// How the call ended and its title, for the session (`Record::ToolEnded`).
    pub status: ToolStatus,
    pub title: String,
    /// A hook's `stopReason`: the turn ends after this call.
    pub stop: Option<String>,
}

/// Runs one call to its end and returns the tool message that answers it.
pub(crate) async fn execute(
    shared: &Shared,
    turn_id: u64,
    expert: Expert,
    call: &ToolCall,
    cancel: &CancellationToken,
) -> Executed {
    // `duration_ms` is the tool's own time: it restarts when an approval is answered, so the
    // minutes a user spends reading the modal are not counted as the command's.
    let mut started = Instant::now();
    let mut args: Result<serde_json::Value, String> = if call.arguments.trim().is_empty() {
        Ok(serde_json::json!({}))
    } else {
        serde_json::from_str(&call.arguments)
            .map_err(|e| format!("the arguments are not valid JSON ({e}); send a JSON object"))
    };
    // A tool this expert is not offered does not exist for it, whatever the registry holds.
    let tool = shared
        .tools
        .get(&call.name)
        .filter(|_| shared.offers(expert, &call.name));
    // PreToolUse runs before anything is shown: a rewritten input is what the user sees run.
    let mut pre = HookOutcome::default();
    let mut interrupted = false;
    if let (Some(_), Ok(input)) = (&tool, &args) {
        pre = hooks::fire_in_turn(
            shared,
            HookEvent::PreToolUse,
            &call.name,
            hooks::fields([
                ("tool_name", call.name.clone().into()),
                ("tool_input", input.clone()),
                ("tool_use_id", call.id.clone().into()),
            ]),
            cancel,
        )
        .await
        .unwrap_or_else(|hooks::Interrupted| {
            interrupted = true;
            HookOutcome::default()
        });
        if pre.blocked.is_none()
            && let Some(updated) = pre.updated_input.take()
        {
            args = Ok(updated);
        }
    }
    let mut stop = pre.stop.clone();
    let shown_args = args
        .clone()
        .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
    let title = match (&tool, &args) {
        (Some(t), Ok(a)) => t.title(a),
        _ => call.name.clone(),
    };
    shared.events.emit(Event::ToolBegin {
        turn_id,
        call_id: call.id.clone(),
        tool: call.name.clone(),
        arguments: shown_args,
        title: title.clone(),
    });
    let mut ran_input = None;
    let mut result = match (tool, args) {
        (None, _) => ToolResult::error(format!(
            "There is no tool named `{}`. Available tools: {}.",
            call.name,
            available(shared, expert)
        )),
        (Some(_), Err(e)) => ToolResult::error(e),
        (Some(_), Ok(_)) if interrupted => ToolResult {
            content: stopped_text(shared),
            status: ToolStatus::Interrupted,
            exit_code: None,
        },
        (Some(_), Ok(_)) if pre.blocked.is_some() || pre.stop.is_some() => ToolResult {
            content: format!(
                "A PreToolUse hook blocked this call: {}",
                pre.blocked
                    .as_deref()
                    .or(pre.stop.as_deref())
                    .unwrap_or_default()
            ),
            status: ToolStatus::Declined,
            exit_code: None,
        },
        (Some(tool), Ok(args)) => {
            let ctx = ToolContext {
                workspace: shared.cfg.workspace.clone(),
                call_id: call.id.clone(),
                events: shared.events.clone(),
                cancel: cancel.child_token(),
                state: shared.tool_state.clone(),
            };
            let need = tool.approval(&args, &ctx);
            let prefixes = lock(&shared.approved_prefixes).clone();
            let policy = *lock(&shared.approval);
            let interactive = !shared.cfg.headless;
            let verdict = match pre.permission {
                // The user's own hook allowed it; the sandbox still applies.
                Some(Permission::Allow) => Verdict::Run,
                Some(Permission::Ask) if interactive && !matches!(need, ApprovalNeed::None) => {
                    Verdict::Ask
                }
                Some(Permission::Ask) if !interactive => Verdict::Decline(
                    "A hook asked for the user's approval of this call, and nobody can answer \
                     in this run."
                        .into(),
                ),
                _ => approval::decide(
                    policy,
                    &need,
                    interactive,
                    &shared.cfg.allowed_commands,
                    &prefixes,
                ),
            };
            let allowed = match verdict {
                Verdict::Run => Ok(()),
                Verdict::Decline(why) => Err(why),
                Verdict::Ask => {
                    let answer = ask(shared, &call.id, &call.name, &need, cancel).await;
                    started = Instant::now();
                    answer
                }
            };
            match allowed {
                Ok(()) => {
                    ran_input = Some(args.clone());
                    tokio::select! {
                        r = tool.run(args, &ctx) => r,
                        _ = cancel.cancelled() => {
                            ctx.cancel.cancel();
                            ToolResult {
                                content: stopped_text(shared),
                                status: ToolStatus::Interrupted,
                                exit_code: None,
                            }
                        }
                    }
                }
                Err(why) => ToolResult {
                    content: why,
                    status: ToolStatus::Declined,
                    exit_code: None,
                },
            }
        }
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut notes: Vec<String> = pre
        .context_text()
        .map(|c| hooks::for_model(HookEvent::PreToolUse, &c))
        .into_iter()
        .collect();
    if let Some(input) = ran_input
        && result.status != ToolStatus::Interrupted
    {
        let post = hooks::fire_in_turn(
            shared,
            HookEvent::PostToolUse,
            &call.name,
            hooks::fields([
                ("tool_name", call.name.clone().into()),
                ("tool_input", input),
                (
                    "tool_response",
                    serde_json::json!({
                        "output": result.content,
                        "status": result.status,
                        "exit_code": result.exit_code,
                    }),
                ),
                ("tool_use_id", call.id.clone().into()),
            ]),
            cancel,
        )
        .await
        .unwrap_or_default();
        // The tool ran already: a block is feedback for the model, not an undo.
        if let Some(why) = &post.blocked {
            notes.push(hooks::for_model(HookEvent::PostToolUse, why));
        }
        if let Some(c) = post.context_text() {
            notes.push(hooks::for_model(HookEvent::PostToolUse, &c));
        }
        stop = stop.or(post.stop);
    }
    for note in notes {
        result.content = format!("{}\n\n{note}", result.content.trim_end());
    }
    shared.events.emit(Event::ToolEnd {
        call_id: call.id.clone(),
        status: result.status,
        exit_code: result.exit_code,
        duration_ms,
        output: result.content.clone(),
    });
    Executed {
        message: ChatMessage::tool_result(call.id.clone(), result.content),
        status: result.status,
        title,
        stop,
    }
}

/// What the model is told of a call the turn's stop cut short: who or what stopped it.
pub(super) fn stopped_text(shared: &Shared) -> String {
    match &*lock(&shared.stop_reason) {
        Some(reason) => format!("Interrupted: {reason}."),
        None => "Interrupted by the user.".into(),
    }
}

/// Asks the frontend and waits for the decision. `Err` carries what the model is told.
async fn ask(
    shared: &Shared,
    call_id: &str,
    tool: &str,
    need: &ApprovalNeed,
    cancel: &CancellationToken,
) -> Result<(), String> {
    let mut offered = None;
    let request = match need {
        ApprovalNeed::None => return Ok(()),
        ApprovalNeed::Edit { path, diff } => ApprovalRequest::Edit {
            path: path.clone(),
            diff: diff.clone(),
        },
        ApprovalNeed::Command { command, argv, cwd } => ApprovalRequest::Command {
            command: crate::tool::approval::shown_command(command),
            argv: argv.clone(),
            cwd: crate::tool::approval::shown_command(cwd),
            remember: {
                offered = crate::tool::approval::remember_prefix(command, argv);
                offered.clone()
            },
        },
        // The tool with its arguments where a command would stand; "don't ask again" keeps
        // the tool's name, which `[approval] allow` would hold too.
        ApprovalNeed::Mcp {
            tool,
            server,
            arguments,
        } => ApprovalRequest::Command {
            command: crate::tool::approval::shown_command(&format!("{tool} {arguments}")),
            argv: Vec::new(),
            cwd: crate::tool::approval::shown_command(&format!(
                "MCP server `{server}` (outside the sandbox)"
            )),
            remember: {
                offered = Some(vec![tool.clone()]);
                offered.clone()
            },
        },
        // Shown as what is typed, control keys spelled out; where it goes stands in the
        // place of the working folder.
        ApprovalNeed::Input {
            session,
            program,
            text,
        } => ApprovalRequest::Command {
            command: text.escape_debug().to_string(),
            argv: Vec::new(),
            cwd: crate::tool::approval::shown_command(&format!("session {session} (`{program}`)")),
            remember: None,
        },
    };
    let (tx, mut rx) = oneshot::channel();
    lock(&shared.pending_approvals).insert(call_id.to_string(), tx);
    shared.events.emit(Event::ApprovalRequested {
        call_id: call_id.to_string(),
        request,
    });
    // The user's notification hook runs while the question waits, never before it.
    let message = format!("baton needs your permission to use {tool}");
    let notify = hooks::fire(
        shared,
        HookEvent::Notification,
        "permission_prompt",
        hooks::fields([
            ("message", message.into()),
            ("notification_type", "permission_prompt".into()),
        ]),
    );
    tokio::pin!(notify);
    let mut notified = false;
    let decision = loop {
        tokio::select! {
            d = &mut rx => break d.ok(),
            _ = &mut notify, if !notified => notified = true,
            _ = cancel.cancelled() => break None,
        }
    };
    lock(&shared.pending_approvals).remove(call_id);
    match decision {
        Some(ApprovalDecision::Approve) => Ok(()),
        Some(ApprovalDecision::ApproveForPrefix { prefix }) => {
            // The core decides what may be remembered: the offered prefix or a narrower one
            // (the REPL remembers the whole argv). A frontend that answers with a wider prefix,
            // or one where none was offered, approves this one call only.
            if offered
                .as_ref()
                .is_some_and(|o| crate::tool::approval::matches_prefix(&prefix, o))
            {
                lock(&shared.approved_prefixes).push(prefix);
            }
            Ok(())
        }
        Some(ApprovalDecision::Deny) => Err("The user declined this call.".into()),
        Some(ApprovalDecision::DenyWithReason { reason }) => {
            Err(format!("The user declined this call: {reason}"))
        }
        None => Err("Interrupted before the user decided.".into()),
    }
}

/// The tools `expert` may call, for the model's "no such tool" message.
fn available(shared: &Shared, expert: Expert) -> String {
    let names: Vec<String> = shared
        .tool_specs(expert)
        .into_iter()
        .map(|s| s.name)
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}
