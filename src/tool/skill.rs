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
        ctx: &'a ToolContext,
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
            let workspace = ctx.workspace.clone();
            let read = tokio::task::spawn_blocking(move || read_body(&file, &workspace)).await;
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

/// A skill's instructions. A project's `SKILL.md` was checked to stay inside the workspace
/// when the session started, but a command may have swapped it (or a folder above it) for a
/// symlink since (`ln -sf ~/.ssh/id_ed25519 .agents/skills/x/SKILL.md`): it is resolved and
/// read beneath the workspace as `read_file` reads (a link that leads outside is refused). The user's own skills are
/// read as they are.
fn read_body(skill: &Skill, workspace: &std::path::Path) -> Result<String, String> {
    let canonical = workspace.canonicalize().ok();
    let rel = skill.path.strip_prefix(workspace).ok().or_else(|| {
        canonical
            .as_deref()
            .and_then(|c| skill.path.strip_prefix(c).ok())
    });
    let Some(rel) = rel else {
        return skill.body().map_err(|e| e.to_string());
    };
    let shown = rel.display().to_string();
    let at = crate::tool::path::resolve(workspace, &shown).map_err(|e| e.to_string())?;
    let beneath = crate::tool::fs::Beneath::new(workspace).map_err(|e| e.to_string())?;
    match beneath.read_existing(&at.abs, &shown) {
        Ok(Some(bytes)) => Ok(Skill::body_of(&String::from_utf8_lossy(&bytes))),
        Ok(None) => Err(format!("{shown} no longer exists")),
        Err(e) => Err(e.to_string()),
    }
}
