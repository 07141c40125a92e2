//! Executing the model's tool calls: unknown names and bad arguments become results the model
//! can read, the approval policy decides, events report begin/output/end.

use std::time::Instant;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::approval::{self, Verdict};
use super::{Shared, lock};
use crate::protocol::{ApprovalDecision, ApprovalRequest, Event, ToolStatus};
use crate::protocol::{ChatMessage, ToolCall};
use crate::tool::{ApprovalNeed, ToolContext, ToolResult};

/// Runs one call to its end and returns the tool message that answers it.
pub(crate) async fn execute(
    shared: &Shared,
    turn_id: u64,
    call: &ToolCall,
    cancel: &CancellationToken,
) -> ChatMessage {
    // `duration_ms` is the tool's own time: it restarts when an approval is answered, so the
    // minutes a user spends reading the modal are not counted as the command's.
    let mut started = Instant::now();
    let args: Result<serde_json::Value, String> = if call.arguments.trim().is_empty() {
        Ok(serde_json::json!({}))
    } else {
        serde_json::from_str(&call.arguments)
            .map_err(|e| format!("the arguments are not valid JSON ({e}); send a JSON object"))
    };
    let tool = shared.tools.get(&call.name);
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
        title,
    });
    let result = match (tool, args) {
        (None, _) => ToolResult::error(format!(
            "There is no tool named `{}`. Available tools: {}.",
            call.name,
            shared.tools.names().join(", ")
        )),
        (Some(_), Err(e)) => ToolResult::error(e),
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
            let verdict = approval::decide(
                policy,
                &need,
                !shared.cfg.headless,
                &shared.cfg.allowed_commands,
                &prefixes,
            );
            let allowed = match verdict {
                Verdict::Run => Ok(()),
                Verdict::Decline(why) => Err(why),
                Verdict::Ask => {
                    let answer = ask(shared, &call.id, &need, cancel).await;
                    started = Instant::now();
                    answer
                }
            };
            match allowed {
                Ok(()) => {
                    tokio::select! {
                        r = tool.run(args, &ctx) => r,
                        _ = cancel.cancelled() => {
                            ctx.cancel.cancel();
                            ToolResult {
                                content: "Interrupted by the user.".into(),
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
    shared.events.emit(Event::ToolEnd {
        call_id: call.id.clone(),
        status: result.status,
        exit_code: result.exit_code,
        duration_ms: started.elapsed().as_millis() as u64,
        output: result.content.clone(),
    });
    ChatMessage::tool_result(call.id.clone(), result.content)
}

/// Asks the frontend and waits for the decision. `Err` carries what the model is told.
async fn ask(
    shared: &Shared,
    call_id: &str,
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
    let (tx, rx) = oneshot::channel();
    lock(&shared.pending_approvals).insert(call_id.to_string(), tx);
    shared.events.emit(Event::ApprovalRequested {
        call_id: call_id.to_string(),
        request,
    });
    let decision = tokio::select! {
        d = rx => d.ok(),
        _ = cancel.cancelled() => None,
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
