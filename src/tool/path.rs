//! Workspace path resolution: every path a tool receives goes through `resolve` (or
//! `resolve_for_write`), which refuses `..`, absolute paths outside the workspace, symlinks
//! that lead outside, paths the sandbox hides from commands (credentials, baton's own
//! configuration) and (for writes) paths the sandbox protects, and names the offending path in
//! the error. It decides which file is meant; `tool::fs::Beneath` then opens it.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::protocol::SandboxMode;
use crate::sandbox::{SandboxPolicy, WriteRules};

/// A path checked to lie inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacePath {
    /// Absolute path with every existing symlink resolved.
    pub abs: PathBuf,
    /// The same path relative to the workspace root, `/`-separated (`.` for the root).
    pub rel: String,
}

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path '{0}' contains '..'; give a path inside the workspace without '..'")]
    ParentComponent(String),
    #[error("path '{path}' is outside the workspace {workspace}")]
    OutsideWorkspace { path: String, workspace: String },
    #[error("path '{path}' leads outside the workspace through the symlink '{link}'")]
    SymlinkEscape { path: String, link: String },
    #[error("path '{0}' is inside the .git directory; tools do not write there (use the git tool)")]
    GitDirectory(String),
    #[error(
        "path '{0}' is protected by the sandbox (git internals, baton's own config); tools do not write there"
    )]
    Protected(String),
    #[error(
        "path '{path}' is out of the model's sight: {why}; file tools neither read nor write it"
    )]
    Hidden { path: String, why: &'static str },
    #[error("path '{path}': cannot inspect '{at}': {reason}")]
    Io {
        path: String,
        at: String,
        reason: String,
    },
    #[error("workspace {workspace} cannot be resolved: {reason}")]
    Workspace { workspace: String, reason: String },
}

/// The most symlinks followed while resolving one path (loops end here).
const MAX_SYMLINK_HOPS: usize = 40;

/// The rules the file tools keep to in `workspace`, whatever the session's sandbox mode: the
/// workspace-write policy's (`sandbox::WriteRules`: what may be written, what commands do
/// not see).
pub fn tool_rules(workspace: &Path) -> WriteRules {
    SandboxPolicy::new(SandboxMode::WorkspaceWrite, workspace).write_rules()
}

/// Resolves `input` (relative to `workspace`, or absolute inside it) for reading; a path the
/// sandbox hides from commands, or baton's own configuration, is refused.
pub fn resolve(workspace: &Path, input: &str) -> Result<WorkspacePath, PathError> {
    resolve_visible(workspace, input, &tool_rules(workspace))
}

/// [`resolve`] with the rules already at hand.
pub fn resolve_visible(
    workspace: &Path,
    input: &str,
    rules: &WriteRules,
) -> Result<WorkspacePath, PathError> {
    let resolved = resolve_unchecked(workspace, input)?;
    if let Some(why) = rules.hides(&resolved.abs) {
        return Err(PathError::Hidden {
            path: input.trim().to_string(),
            why: why.explain(),
        });
    }
    Ok(resolved)
}

/// Resolves `input` to the file it names inside `workspace`, whatever the sandbox shows.
fn resolve_unchecked(workspace: &Path, input: &str) -> Result<WorkspacePath, PathError> {
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(PathError::Empty);
    }
    let root = std::fs::canonicalize(workspace).map_err(|e| PathError::Workspace {
        workspace: workspace.display().to_string(),
        reason: e.to_string(),
    })?;
    let given = Path::new(trimmed);
    if given.components().any(|c| c == Component::ParentDir) {
        return Err(PathError::ParentComponent(trimmed.to_string()));
    }
    let relative: PathBuf = if given.is_absolute() {
        let stripped = given
            .strip_prefix(&root)
            .or_else(|_| given.strip_prefix(workspace));
        match stripped {
            Ok(rest) => rest.to_path_buf(),
            Err(_) => {
                return Err(PathError::OutsideWorkspace {
                    path: trimmed.to_string(),
                    workspace: root.display().to_string(),
                });
            }
        }
    } else {
        given.to_path_buf()
    };
    let abs = follow_inside(&root, &relative, trimmed)?;
    let rel = abs
        .strip_prefix(&root)
        .map(display_relative)
        .unwrap_or_else(|_| ".".to_string());
    Ok(WorkspacePath { abs, rel })
}

/// Like `resolve`, and also refuses paths inside a `.git` directory (hooks, config).
pub fn resolve_for_write(workspace: &Path, input: &str) -> Result<WorkspacePath, PathError> {
    let rules = tool_rules(workspace);
    let resolved = resolve_visible(workspace, input, &rules)?;
    let in_git_dir = Path::new(&resolved.rel)
        .components()
        .any(|c| c.as_os_str() == ".git");
    if in_git_dir {
        return Err(PathError::GitDirectory(input.trim().to_string()));
    }
    // The protections of the workspace-write policy hold for file tools whatever the
    // session's sandbox mode: the same write rules the sandbox binds. Checked again on the
    // opened directory when writing.
    if rules.denies(&resolved.abs) {
        return Err(PathError::Protected(input.trim().to_string()));
    }
    Ok(resolved)
}

/// Walks `relative` component by component from `root`, following symlinks as the kernel
/// would, and checks after each step that the path is still inside `root`.
fn follow_inside(root: &Path, relative: &Path, original: &str) -> Result<PathBuf, PathError> {
    let mut pending: Vec<OsString> = relative
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            _ => None,
        })
        .rev()
        .collect();
    let mut current = root.to_path_buf();
    let mut hops = 0usize;
    let mut exists = true;
    while let Some(name) = pending.pop() {
        if name == ".." {
            current.pop();
            if !current.starts_with(root) {
                return Err(PathError::OutsideWorkspace {
                    path: original.to_string(),
                    workspace: root.display().to_string(),
                });
            }
            continue;
        }
        let next = current.join(&name);
        if !exists {
            current = next;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                let target = std::fs::read_link(&next).map_err(|e| PathError::Io {
                    path: original.to_string(),
                    at: next.display().to_string(),
                    reason: e.to_string(),
                })?;
                if hops > MAX_SYMLINK_HOPS || target.is_absolute() && !target.starts_with(root) {
                    return Err(PathError::SymlinkEscape {
                        path: original.to_string(),
                        link: display_link(root, &next),
                    });
                }
                let base = if target.is_absolute() {
                    root.to_path_buf()
                } else {
                    current.clone()
                };
                let target_rel = if target.is_absolute() {
                    target.strip_prefix(root).unwrap_or(&target).to_path_buf()
                } else {
                    target
                };
                // The link's own components are walked next (in order), from its directory.
                current = base;
                for comp in target_rel.components().rev() {
                    match comp {
                        Component::Normal(part) => pending.push(part.to_os_string()),
                        Component::ParentDir => pending.push(OsString::from("..")),
                        _ => {}
                    }
                }
                let escape_check = lexical_target(&current, &target_rel);
                if !escape_check.starts_with(root) {
                    return Err(PathError::SymlinkEscape {
                        path: original.to_string(),
                        link: display_link(root, &next),
                    });
                }
            }
            Ok(_) => current = next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                exists = false;
                current = next;
            }
            Err(e) => {
                return Err(PathError::Io {
                    path: original.to_string(),
                    at: next.display().to_string(),
                    reason: e.to_string(),
                });
            }
        }
    }
    if !current.starts_with(root) {
        return Err(PathError::OutsideWorkspace {
            path: original.to_string(),
            workspace: root.display().to_string(),
        });
    }
    Ok(current)
}

/// Where `relative` points from `base`, resolving `..` lexically (no filesystem access).
fn lexical_target(base: &Path, relative: &Path) -> PathBuf {
    let mut out = base.to_path_buf();
    for comp in relative.components() {
        match comp {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            _ => {}
        }
    }
    out
}

fn display_link(root: &Path, link: &Path) -> String {
    link.strip_prefix(root)
        .map(display_relative)
        .unwrap_or_else(|_| link.display().to_string())
}

/// A workspace-relative path as the model sees it: `/`-separated, `.` for the root.
pub fn display_relative(rel: &Path) -> String {
    let text = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/");
    if text.is_empty() {
        ".".to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "x").unwrap();
        (dir, root)
    }

    #[test]
    fn relative_and_absolute_inside_resolve() {
        let (_d, root) = workspace();
        let r = resolve(&root, "src/lib.rs").unwrap();
        assert_eq!(r.abs, root.join("src/lib.rs"));
        assert_eq!(r.rel, "src/lib.rs");
        let abs = root.join("src/new.rs");
        let r = resolve(&root, abs.to_str().unwrap()).unwrap();
        assert_eq!(r.rel, "src/new.rs");
        assert_eq!(resolve(&root, ".").unwrap().rel, ".");
        assert_eq!(resolve(&root, "./src").unwrap().rel, "src");
    }

    #[test]
    fn parent_and_outside_paths_are_refused() {
        let (_d, root) = workspace();
        let err = resolve(&root, "../x").unwrap_err();
        assert!(err.to_string().contains("'../x'"), "{err}");
        let err = resolve(&root, "/etc/passwd").unwrap_err();
        assert!(matches!(err, PathError::OutsideWorkspace { .. }));
        assert!(err.to_string().contains("/etc/passwd"));
        assert!(resolve(&root, "/proc/self/cwd/x").is_err());
    }

    #[test]
    fn symlinks_inside_are_followed_and_outside_refused() {
        let (_d, root) = workspace();
        std::os::unix::fs::symlink("src", root.join("alias")).unwrap();
        assert_eq!(resolve(&root, "alias/lib.rs").unwrap().rel, "src/lib.rs");
        std::os::unix::fs::symlink("/tmp", root.join("out")).unwrap();
        let err = resolve(&root, "out/x").unwrap_err();
        assert!(matches!(err, PathError::SymlinkEscape { .. }), "{err}");
        std::os::unix::fs::symlink("../..", root.join("src/up")).unwrap();
        assert!(resolve(&root, "src/up/etc").is_err());
        std::os::unix::fs::symlink("/nonexistent/dangling", root.join("dangling")).unwrap();
        assert!(resolve(&root, "dangling").is_err());
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        assert!(resolve(&root, "loop").is_err());
    }

    #[test]
    fn git_directory_is_refused_for_writes() {
        let (_d, root) = workspace();
        let err = resolve_for_write(&root, ".git/hooks/pre-commit").unwrap_err();
        assert!(matches!(err, PathError::GitDirectory(_)));
        assert!(resolve_for_write(&root, "src/.gitignore").is_ok());
    }
}
