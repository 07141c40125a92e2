//! `skill`: reads one skill's instructions when the expert decides it applies. Only the names
//! and descriptions of skills are in the experts' context (`listing`); the body of `SKILL.md`
//! arrives through this tool, so a small context window pays only for the skill in use.

use futures_util::future::BoxFuture;
use serde_json::json;

use crate::config::commands::Skill;
use crate::protocol::ToolSpec;
use crate::tool::{ApprovalNeed, Tool, ToolContext, ToolResult};

pub struct SkillTool {
    skills: Vec<Skill>,
}

impl SkillTool {
    pub fn new(skills: Vec<Skill>) -> SkillTool {
        SkillTool { skills }
    }
}

/// What the experts' system prompt says of the skills: one line each, and how to use them.
pub fn listing(skills: &[Skill]) -> String {
    let mut out = String::from(
        "# Skills\n\nSkills are instructions for particular kinds of work. When one of these \
         applies to the task, call the `skill` tool with its name and follow what it returns \
         before you start.\n",
    );
    for s in skills {
        out.push_str(&format!("- {}: {}\n", s.name, s.description.trim()));
    }
    out
}

impl Tool for SkillTool {
    fn name(&self) -> &'static str {
        "skill"
    }

    fn spec(&self) -> ToolSpec {
        let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
        ToolSpec {
            name: self.name().into(),
            description: "Read the instructions of one skill listed in the system prompt. Call \
                it when a skill applies, before doing the work."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "enum": names, "description": "The skill's name."}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, _args: &serde_json::Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &serde_json::Value) -> String {
        format!("skill {}", args["name"].as_str().unwrap_or("?"))
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let name = args["name"].as_str().unwrap_or("").trim();
            let Some(skill) = self.skills.iter().find(|s| s.name == name) else {
                let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
                return ToolResult::error(format!(
                    "There is no skill named `{name}`. Skills: {}.",
                    names.join(", ")
                ));
            };
            let file = skill.clone();
            let read = tokio::task::spawn_blocking(move || file.body()).await;
            match read {
                Ok(Ok(body)) => {
                    let folder = skill
                        .path
                        .parent()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default();
                    ToolResult::ok(format!(
                        "Skill `{}` (its folder: {folder})\n\n{body}",
                        skill.name
                    ))
                }
                Ok(Err(e)) => {
                    ToolResult::error(format!("cannot read {}: {e}", skill.path.display()))
                }
                Err(e) => ToolResult::error(format!("cannot read the skill: {e}")),
            }
        })
    }
}
