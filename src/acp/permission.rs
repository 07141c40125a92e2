//! baton's approval requests as ACP permission requests, and the client's choice back as an
//! approval decision. What "always allow" remembers is the core's offer, never the client's.

use std::path::Path;

use agent_client_protocol::v1::schema::{
    Diff, PermissionOption, PermissionOptionKind, RequestPermissionOutcome, ToolCallContent,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};

use crate::protocol::{ApprovalDecision, ApprovalPolicy, ApprovalRequest, Op};

const ALLOW: &str = "allow";
const ALLOW_PREFIX: &str = "allow_prefix";
const ALLOW_EDITS: &str = "allow_edits";
const REJECT: &str = "reject";

/// The tool call as the permission dialog shows it: the command, or the edit as a diff.
pub fn tool_call(workspace: &Path, call_id: &str, request: &ApprovalRequest) -> ToolCallUpdate {
    let fields = match request {
        ApprovalRequest::Command {
            command,
            cwd,
            argv,
            remember,
        } => ToolCallUpdateFields::new()
            .kind(ToolKind::Execute)
            .status(ToolCallStatus::Pending)
            .title(command.clone())
            .content(vec![ToolCallContent::from(crate::acp::updates::fenced(
                &format!("$ {command}\n# in {cwd}"),
            ))])
            .raw_input(serde_json::json!({
                "command": command,
                "argv": argv,
                "cwd": cwd,
                "remember": remember,
            })),
        ApprovalRequest::Edit { path, diff } => {
            let file = workspace.join(path);
            let content = match crate::acp::diff::before_change(workspace, &file, diff) {
                Some(t) => ToolCallContent::from(Diff::new(file.clone(), t.new).old_text(t.old)),
                None => ToolCallContent::from(crate::acp::updates::fenced(diff)),
            };
            ToolCallUpdateFields::new()
                .kind(ToolKind::Edit)
                .status(ToolCallStatus::Pending)
                .title(format!("Edit {path}"))
                .content(vec![content])
                .locations(vec![
                    agent_client_protocol::v1::schema::ToolCallLocation::new(file),
                ])
        }
    };
    ToolCallUpdate::new(call_id.to_string(), fields)
}

/// The choices offered: allow once first (a client that allows everything picks the first
/// allow), "always" only where the core offers something to remember.
pub fn options(request: &ApprovalRequest) -> Vec<PermissionOption> {
    let mut options = vec![PermissionOption::new(
        ALLOW,
        "Allow",
        PermissionOptionKind::AllowOnce,
    )];
    match request {
        ApprovalRequest::Command {
            remember: Some(prefix),
            ..
        } if !prefix.is_empty() => options.push(PermissionOption::new(
            ALLOW_PREFIX,
            format!("Always allow `{}` in this session", prefix.join(" ")),
            PermissionOptionKind::AllowAlways,
        )),
        ApprovalRequest::Edit { .. } => options.push(PermissionOption::new(
            ALLOW_EDITS,
            "Allow all edits in this session",
            PermissionOptionKind::AllowAlways,
        )),
        ApprovalRequest::Command { .. } => {}
    }
    options.push(PermissionOption::new(
        REJECT,
        "Reject",
        PermissionOptionKind::RejectOnce,
    ));
    options
}

/// The ops that answer `request` with the client's `outcome` (`None`: no answer came).
pub fn answer(
    call_id: &str,
    request: &ApprovalRequest,
    outcome: Option<&RequestPermissionOutcome>,
) -> Vec<Op> {
    let chosen = match outcome {
        Some(RequestPermissionOutcome::Selected(selected)) => Some(selected.option_id.0.as_ref()),
        _ => None,
    };
    let approve = |decision| Op::Approval {
        call_id: call_id.to_string(),
        decision,
    };
    match (chosen, request) {
        (Some(ALLOW), _) => vec![approve(ApprovalDecision::Approve)],
        (
            Some(ALLOW_PREFIX),
            ApprovalRequest::Command {
                remember: Some(prefix),
                ..
            },
        ) => vec![approve(ApprovalDecision::ApproveForPrefix {
            prefix: prefix.clone(),
        })],
        (Some(ALLOW_EDITS), ApprovalRequest::Edit { .. }) => vec![
            Op::SetApprovalPolicy {
                policy: ApprovalPolicy::AutoEdit,
            },
            approve(ApprovalDecision::Approve),
        ],
        (Some(REJECT), _) => vec![approve(ApprovalDecision::Deny)],
        // Cancelled (the prompt is being cancelled), an option this request did not offer,
        // or no answer at all: the call does not run.
        (Some(_), _) => vec![approve(ApprovalDecision::DenyWithReason {
            reason: "the editor answered with an option that was not offered".into(),
        })],
        (None, _) => vec![approve(ApprovalDecision::Deny)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::SelectedPermissionOutcome;

    fn command(remember: Option<Vec<String>>) -> ApprovalRequest {
        ApprovalRequest::Command {
            command: "cargo test".into(),
            argv: vec!["cargo".into(), "test".into()],
            cwd: "/ws".into(),
            remember,
        }
    }

    fn selected(id: &str) -> RequestPermissionOutcome {
        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id.to_string()))
    }

    #[test]
    fn always_is_offered_only_with_the_cores_prefix_and_answers_with_it() {
        let offered = command(Some(vec!["cargo".into(), "test".into()]));
        let ids: Vec<String> = options(&offered)
            .iter()
            .map(|o| o.option_id.0.to_string())
            .collect();
        assert_eq!(ids, [ALLOW, ALLOW_PREFIX, REJECT]);
        let ops = answer("c", &offered, Some(&selected(ALLOW_PREFIX)));
        assert_eq!(
            ops,
            [Op::Approval {
                call_id: "c".into(),
                decision: ApprovalDecision::ApproveForPrefix {
                    prefix: vec!["cargo".into(), "test".into()]
                }
            }]
        );
        let none = command(None);
        assert_eq!(options(&none).len(), 2);
        // A client answering "always" where it was not offered gets nothing remembered.
        let ops = answer("c", &none, Some(&selected(ALLOW_PREFIX)));
        assert!(matches!(
            &ops[..],
            [Op::Approval {
                decision: ApprovalDecision::DenyWithReason { .. },
                ..
            }]
        ));
    }

    #[test]
    fn cancelled_and_unanswered_requests_deny() {
        let req = command(None);
        for outcome in [Some(&RequestPermissionOutcome::Cancelled), None] {
            assert_eq!(
                answer("c", &req, outcome),
                [Op::Approval {
                    call_id: "c".into(),
                    decision: ApprovalDecision::Deny
                }]
            );
        }
    }
}
