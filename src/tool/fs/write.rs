//! `write_file`: create a file or replace a whole file's content (parent directories created,
//! permissions and line endings of an existing file kept).

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use super::{Beneath, LineEnding, UnreadPolicy, check_fresh, read_existing, write_change};
use crate::protocol::ToolSpec;
use crate::tool::call::{into_result, parse_args, run_blocking};
use crate::tool::diff::{line_counts, unified_diff};
use crate::tool::path::resolve_for_write;
use crate::tool::{ApprovalNeed, Tool, ToolContext, ToolError, ToolResult};

#[derive(Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

pub struct WriteFileTool;

/// What a write would do, computed without touching the disk.
struct PlannedWrite {
    beneath: Beneath,
    abs: std::path::PathBuf,
    rel: String,
    old: Option<Vec<u8>>,
    new: Vec<u8>,
}

fn plan_write(args: &serde_json::Value, ctx: &ToolContext) -> Result<PlannedWrite, ToolError> {
    let args: WriteArgs = parse_args("write_file", args)?;
    let target = resolve_for_write(&ctx.workspace, &args.path)?;
    let beneath = Beneath::new(&ctx.workspace)?;
    let old = read_existing(&beneath, &target.abs, &target.rel)?;
    // An existing file keeps its line endings even when the model writes `\n`.
    let new = match &old {
        Some(bytes) if LineEnding::detect(bytes) == LineEnding::CrLf => {
            LineEnding::CrLf.apply(&args.content).into_bytes()
        }
        _ => args.content.into_bytes(),
    };
    Ok(PlannedWrite {
        beneath,
        abs: target.abs,
        rel: target.rel,
        old,
        new,
    })
}

impl Tool for WriteFileTool {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Create a new file, or replace the entire content of an existing file. \
                Missing parent directories are created. To overwrite an existing file you must \
                have read it with read_file first (and it must not have changed since). For a \
                small change to an existing file prefer `edit` or `apply_patch`. An existing \
                file keeps its permissions and its line endings (CRLF stays CRLF)."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace root (or absolute inside it)."},
                    "content": {"type": "string", "description": "The complete new content of the file."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, args: &serde_json::Value, ctx: &ToolContext) -> ApprovalNeed {
        match plan_write(args, ctx) {
            Ok(plan) => ApprovalNeed::Edit {
                diff: unified_diff(&plan.rel, plan.old.as_deref(), Some(&plan.new)),
                path: plan.rel,
            },
            Err(reason) => ApprovalNeed::Edit {
                path: args["path"].as_str().unwrap_or("?").to_string(),
                diff: format!("(this write will fail: {reason})"),
            },
        }
    }

    fn title(&self, args: &serde_json::Value) -> String {
        format!("write {}", args["path"].as_str().unwrap_or("?"))
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        run_blocking(ctx, move |ctx| into_result(write_file(&args, ctx)))
    }
}

fn write_file(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let plan = plan_write(args, ctx)?;
    check_fresh(ctx, &plan.abs, &plan.rel, UnreadPolicy::Refuse)?;
    if plan.old.as_deref() == Some(plan.new.as_slice()) {
        return Ok(format!("{}: unchanged (content is identical)", plan.rel));
    }
    let diff = write_change(
        ctx,
        &plan.beneath,
        &plan.abs,
        &plan.rel,
        plan.old.as_deref(),
        &plan.new,
    )?;
    let lines = plan.new.iter().filter(|&&b| b == b'\n').count();
    Ok(match plan.old {
        None => format!(
            "Created {} ({} bytes, {lines} lines)",
            plan.rel,
            plan.new.len()
        ),
        Some(_) => {
            let (added, removed) = line_counts(&diff);
            format!(
                "Wrote {} ({} bytes, {lines} lines; +{added} -{removed})",
                plan.rel,
                plan.new.len()
            )
        }
    })
}
