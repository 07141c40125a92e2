//! Whether a path lies where a later session, or the user's git, would trust what it finds.

use std::path::{Path, PathBuf};

use super::roots::{inside_any, project_roots, writable_ancestors, writable_dirs};
use crate::sandbox::policy::SandboxPolicy;

/// What decides whether a path lies in a folder a later session or the user's git would
/// trust (see [`TrustedFolders::holds`]): the writable directories and the repository tops,
/// resolved once.
#[derive(Debug, Clone, Default)]
pub struct TrustedFolders {
    writable: Vec<PathBuf>,
    tops: Vec<PathBuf>,
}

impl TrustedFolders {
    pub fn of(policy: &SandboxPolicy) -> TrustedFolders {
        let writable = writable_dirs(policy);
        let mut tops = project_roots(policy, &writable);
        tops.extend(writable_ancestors(policy, &writable));
        TrustedFolders { writable, tops }
    }

    /// Whether `path` (absolute, resolved) lies in a `.baton` folder, or in a nested
    /// repository's `.git`, inside a writable root: a session started in that folder, or the
    /// user's git run there, would trust it. (The `.git` of the workspace, of a `--write` root
    /// or of a folder above the workspace has finer rules: its refs, objects and index stay
    /// writable.)
    pub fn holds(&self, path: &Path) -> bool {
        let (writable, tops) = (&self.writable, &self.tops);
        if !inside_any(path, writable) {
            return false;
        }
        // git takes a folder holding a `HEAD` for a git directory when it runs there, so a
        // `HEAD` may not be written, nor what git trusts beside one.
        if path.file_name().is_some_and(|n| n == "HEAD") {
            return true;
        }
        // What a hook manager runs at the user's next commit, here or in a nested repository.
        if super::hook_managers::guards(path, writable) {
            return true;
        }
        let beside_head = path
            .ancestors()
            .skip(1)
            .take_while(|a| inside_any(a, writable))
            .any(|a| {
                a.join("HEAD").is_file()
                    && path
                        .strip_prefix(a)
                        .ok()
                        .and_then(|r| r.iter().next())
                        .is_some_and(|first| {
                            ["config", "config.worktree", "commondir", "hooks", "info"]
                                .iter()
                                .any(|n| first == *n)
                        })
            });
        beside_head
            || path
                .ancestors()
                .take_while(|a| inside_any(a, writable))
                .any(|a| match a.file_name() {
                    Some(n) if n == ".baton" => true,
                    Some(n) if n == ".git" => {
                        a.parent().is_some_and(|p| !tops.iter().any(|t| t == p))
                    }
                    _ => false,
                })
    }
}
