//! `update_plan`: the expert's todo list. The whole list is replaced on every call, kept in
//! `ToolState::plan`, and announced with `Event::PlanUpdated` so frontends can show it.

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use crate::protocol::ToolSpec;
use crate::protocol::{Event, PlanItem, PlanStatus};
use crate::tool::call::{into_result, parse_args};
use crate::tool::{ApprovalNeed, Tool, ToolContext, ToolError, ToolResult};

/// Most items a plan may have.
pub const MAX_PLAN_ITEMS: usize = 50;

#[derive(Deserialize)]
struct PlanArgs {
    #[serde(default)]
    explanation: Option<String>,
    plan: Vec<PlanItem>,
}

pub struct UpdatePlanTool;

impl Tool for UpdatePlanTool {
    fn name(&self) -> &'static str {
        "update_plan"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Record your plan for the task as a short list of steps, each \
                pending, in_progress or completed. Send the whole list every time (it replaces \
                the previous one). Make a plan at the start of any multi-step task, keep \
                exactly one step in_progress while working, and mark steps completed as soon \
                as they are done. The user sees the plan."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "explanation": {"type": "string", "description": "Optional: why the plan changed."},
                    "plan": {
                        "type": "array",
                        "description": "The steps, in order.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "step": {"type": "string", "description": "One short sentence."},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                            },
                            "required": ["step", "status"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["plan"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, _args: &serde_json::Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &serde_json::Value) -> String {
        let count = args["plan"].as_array().map_or(0, Vec::len);
        format!("update plan ({count} steps)")
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move { into_result(update_plan(&args, ctx)) })
    }
}

fn update_plan(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let args: PlanArgs = parse_args("update_plan", args)?;
    if args.plan.len() > MAX_PLAN_ITEMS {
        return Err(ToolError::invalid_argument(format!(
            "the plan has {} steps; keep it to at most {MAX_PLAN_ITEMS}",
            args.plan.len()
        )));
    }
    if let Some(empty) = args.plan.iter().position(|i| i.step.trim().is_empty()) {
        return Err(ToolError::invalid_argument(format!(
            "step {} has no text",
            empty + 1
        )));
    }
    let in_progress = args
        .plan
        .iter()
        .filter(|i| i.status == PlanStatus::InProgress)
        .count();
    if in_progress > 1 {
        return Err(ToolError::invalid_argument(format!(
            "{in_progress} steps are in_progress; at most one step may be in_progress"
        )));
    }
    if let Ok(mut plan) = ctx.state.plan.lock() {
        *plan = args.plan.clone();
    }
    ctx.events.emit(Event::PlanUpdated {
        items: args.plan.clone(),
    });
    let done = args
        .plan
        .iter()
        .filter(|i| i.status == PlanStatus::Completed)
        .count();
    let mut out = format!("Plan updated ({done}/{} completed)", args.plan.len());
    if let Some(why) = args.explanation.filter(|w| !w.trim().is_empty()) {
        out.push_str(&format!(": {}", why.trim()));
    }
    out.push('\n');
    for item in &args.plan {
        let mark = match item.status {
            PlanStatus::Completed => "[x]",
            PlanStatus::InProgress => "[>]",
            PlanStatus::Pending => "[ ]",
        };
        out.push_str(&format!("{mark} {}\n", item.step.trim()));
    }
    Ok(out)
}
