//! The two read-only tools the agent core needs on its own: `read_file` and `list_dir`.
//! Paths are workspace-relative; anything resolving outside the workspace is refused.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::backend::ToolSpec;
use crate::tool::{ApprovalNeed, Tool, ToolContext, ToolRegistry, ToolResult};

/// Largest file `read_file` returns whole; longer files need a line range.
const MAX_READ_BYTES: usize = 256 * 1024;
const MAX_LIST_ENTRIES: usize = 500;

/// A registry with only `read_file` and `list_dir`.
pub fn basic_registry() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(Arc::new(ReadFile));
    r.register(Arc::new(ListDir));
    r
}

/// Resolves a model-given path inside the workspace, refusing `..` and symlink escapes.
pub fn resolve_in_workspace(workspace: &Path, given: &str) -> Result<PathBuf, String> {
    let rel = Path::new(given.trim());
    if rel
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return Err(format!("'{given}': paths may not contain '..'"));
    }
    let joined = if rel.is_absolute() {
        rel.to_path_buf()
    } else {
        workspace.join(rel)
    };
    let real = joined
        .canonicalize()
        .map_err(|e| format!("'{given}': {e}"))?;
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    if !real.starts_with(&root) {
        return Err(format!("'{given}' is outside the workspace"));
    }
    Ok(real)
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

pub struct ReadFile;

impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description:
                "Read a text file of the workspace. Optional 1-based inclusive line range.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "workspace-relative path"},
                    "start_line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1}
                },
                "required": ["path"]
            }),
        }
    }

    fn approval(&self, _args: &Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &Value) -> String {
        format!("read {}", str_arg(args, "path").unwrap_or("?"))
    }

    fn run<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let Some(given) = str_arg(&args, "path") else {
                return ToolResult::error("missing string argument `path`");
            };
            let path = match resolve_in_workspace(&ctx.workspace, given) {
                Ok(p) => p,
                Err(e) => return ToolResult::error(e),
            };
            let bytes = match tokio::fs::read(&path).await {
                Ok(b) => b,
                Err(e) => return ToolResult::error(format!("'{given}': {e}")),
            };
            if bytes.iter().take(8192).any(|&b| b == 0) {
                return ToolResult::error(format!(
                    "'{given}' is a binary file ({} bytes)",
                    bytes.len()
                ));
            }
            let text = String::from_utf8_lossy(&bytes);
            let start = args.get("start_line").and_then(Value::as_u64);
            let end = args.get("end_line").and_then(Value::as_u64);
            if start.is_none() && end.is_none() {
                if bytes.len() > MAX_READ_BYTES {
                    return ToolResult::error(format!(
                        "'{given}' has {} bytes; read it in line ranges (start_line, end_line)",
                        bytes.len()
                    ));
                }
                return ToolResult::ok(text.into_owned());
            }
            let first = start.unwrap_or(1).max(1) as usize;
            let last = end.map_or(usize::MAX, |e| e as usize);
            let selected: Vec<&str> = text
                .lines()
                .enumerate()
                .filter(|(i, _)| *i + 1 >= first && *i < last)
                .map(|(_, l)| l)
                .collect();
            let mut out = selected.join("\n");
            if out.len() > MAX_READ_BYTES {
                let mut cut = MAX_READ_BYTES;
                while !out.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.truncate(cut);
                out.push_str("\n[output truncated: ask for a smaller range]");
            }
            ToolResult::ok(out)
        })
    }
}

pub struct ListDir;

impl Tool for ListDir {
    fn name(&self) -> &'static str {
        "list_dir"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_dir".into(),
            description: "List a folder of the workspace (folders end with '/').".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "workspace-relative folder, default '.'"}
                }
            }),
        }
    }

    fn approval(&self, _args: &Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &Value) -> String {
        format!("list {}", str_arg(args, "path").unwrap_or("."))
    }

    fn run<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let given = str_arg(&args, "path").unwrap_or(".");
            let path = match resolve_in_workspace(&ctx.workspace, given) {
                Ok(p) => p,
                Err(e) => return ToolResult::error(e),
            };
            let mut rd = match tokio::fs::read_dir(&path).await {
                Ok(rd) => rd,
                Err(e) => return ToolResult::error(format!("'{given}': {e}")),
            };
            let mut names = Vec::new();
            while let Ok(Some(entry)) = rd.next_entry().await {
                let mut name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
                    name.push('/');
                }
                names.push(name);
            }
            names.sort();
            let total = names.len();
            names.truncate(MAX_LIST_ENTRIES);
            let mut out = names.join("\n");
            if total > MAX_LIST_ENTRIES {
                out.push_str(&format!(
                    "\n[{} more entries not shown]",
                    total - MAX_LIST_ENTRIES
                ));
            }
            if total == 0 {
                out = "(empty folder)".into();
            }
            ToolResult::ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_outside_the_workspace_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "x").unwrap();
        assert!(resolve_in_workspace(dir.path(), "a.txt").is_ok());
        assert!(resolve_in_workspace(dir.path(), "../etc/passwd").is_err());
        assert!(resolve_in_workspace(dir.path(), "/etc/passwd").is_err());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", dir.path().join("esc")).unwrap();
            assert!(resolve_in_workspace(dir.path(), "esc/passwd").is_err());
        }
    }
}
