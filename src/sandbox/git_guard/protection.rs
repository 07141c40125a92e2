//! What the launcher pins read-only before a command starts, and what file tools refuse.

use std::path::{Path, PathBuf};

use super::gitdirs::{
    GitConfigs, MAX_GITDIR_DEPTH, commondir_of, gitdir_of, hooks_dirs, husky_dir, list_dirs,
};
use super::hook_managers;
use super::roots::{baton_homes, inside_any, project_roots, writable_ancestors, writable_dirs};
use crate::protocol::SandboxMode;
use crate::sandbox::policy::SandboxPolicy;

/// Files and directories inside a gitdir that git executes or trusts.
const GITDIR_TRUSTED: &[&str] = &["config", "config.worktree", "hooks", "commondir", "info"];

/// Subtrees of a gitdir that hold other gitdirs (submodules, linked worktrees).
const GITDIR_NESTED: &[&str] = &["modules", "worktrees"];

/// Files in a linked worktree's gitdir (`.git/worktrees/NAME/`) that redirect git.
const WORKTREE_REDIRECTS: &[&str] = &["commondir", "gitdir", "config.worktree"];

/// What the launcher pins for one policy.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Protection {
    /// Existing files and directories bound read-only.
    pub read_only: Vec<PathBuf>,
    /// Existing directories bound onto themselves first: a mount point cannot be renamed or
    /// removed, so a protected directory can't be moved aside and replaced by a writable copy.
    pub pinned: Vec<PathBuf>,
    /// Everything refused to file tools, existing or not (a subtree each).
    pub denied: Vec<PathBuf>,
    /// Folders of the work tree the hooks' PATH searches before the system's (husky's
    /// `node_modules/.bin`): an entry there named like a program of the system would start in
    /// its place at every commit. Refused to file tools ([`Protection::shadows`]) and moved
    /// aside by the audit after a command.
    pub shadowing: Vec<PathBuf>,
}

impl Protection {
    fn read_only(&mut self, p: PathBuf) {
        if !self.read_only.contains(&p) {
            self.read_only.push(p);
        }
    }
    fn pin(&mut self, p: PathBuf) {
        if !self.pinned.contains(&p) {
            self.pinned.push(p);
        }
    }
    /// Whether `path` (absolute) is an entry of a [`Protection::shadowing`] folder named like a
    /// program found on the PATH outside `roots` (`sh`, `git`, `node`): the file tools'
    /// side of the audit's rule. A package's own command (`eslint`) is the project's code.
    pub fn shadows(&self, path: &Path, roots: &[PathBuf]) -> bool {
        let (Some(folder), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
        else {
            return false;
        };
        self.shadowing.iter().any(|s| s == folder)
            && crate::protocol::host_programs::find_program(name, roots).is_some()
    }

    fn deny(&mut self, p: PathBuf) {
        if !self.denied.contains(&p) {
            self.denied.push(p);
        }
    }
}

/// What the launcher pins and the file tools refuse for `policy`.
pub fn protection(policy: &SandboxPolicy) -> Protection {
    let mut out = Protection::default();
    if policy.mode == SandboxMode::Off {
        return out;
    }
    let writable = writable_dirs(policy);
    let roots = project_roots(policy, &writable);
    let mut repo_tops: Vec<PathBuf> = roots.clone();
    repo_tops.extend(writable_ancestors(policy, &writable));
    // The user's own git settings, where they lie in a writable root: read-only like an
    // included file, whether or not a repository is in sight.
    for file in GitConfigs::user_files() {
        protect_included(&file, &writable, &mut out);
    }
    for top in &repo_tops {
        let dot_git = top.join(".git");
        for name in GITDIR_TRUSTED.iter().chain(GITDIR_NESTED) {
            out.deny(dot_git.join(name));
        }
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
            continue;
        };
        if meta.is_file() {
            // A `gitdir:` pointer (worktree, submodule): repointing it would be an escape.
            out.read_only(dot_git.clone());
            out.deny(dot_git.clone());
        } else if meta.file_type().is_symlink() {
            out.deny(dot_git.clone());
        }
        if let Some(gitdir) = gitdir_of(&dot_git) {
            protect_gitdir(&gitdir, &writable, &mut out, 0);
            let configs = GitConfigs::read(&gitdir);
            for hooks in configs.hooks_paths(top) {
                protect_hooks_path(&hooks, &writable, &mut out);
            }
            // What a hook manager installed there runs at each commit: like an included file.
            let dirs = hooks_dirs(&gitdir, &configs, top);
            let managed = hook_managers::managed(&dirs, top);
            for obeyed in managed.obeyed.iter().chain(&managed.programs) {
                protect_included(obeyed, &writable, &mut out);
            }
            for folder in managed.shadowing {
                if !out.shadowing.contains(&folder) {
                    out.shadowing.push(folder);
                }
            }
            for included in configs.included() {
                protect_included(included, &writable, &mut out);
            }
            // A program git's settings name in the work tree: protected like an included file.
            for program in configs.program_files(top) {
                protect_included(&program, &writable, &mut out);
            }
        }
    }
    for home in baton_homes(policy, &writable) {
        let b = home.join(".baton");
        out.deny(b.clone());
        if std::fs::symlink_metadata(&b).is_ok_and(|m| !m.file_type().is_symlink()) {
            out.read_only(b);
        }
    }
    // Parents before children: a pin must exist before a read-only bind beneath it.
    out.pinned.sort_by_key(|p| p.components().count());
    out
}

fn protect_gitdir(gitdir: &Path, writable: &[PathBuf], out: &mut Protection, depth: usize) {
    if depth > MAX_GITDIR_DEPTH || !gitdir.is_dir() {
        return;
    }
    let inside = inside_any(gitdir, writable);
    for name in GITDIR_TRUSTED.iter().chain(GITDIR_NESTED) {
        out.deny(gitdir.join(name));
    }
    if inside {
        out.pin(gitdir.to_path_buf());
        for name in GITDIR_TRUSTED {
            let p = gitdir.join(name);
            if p.exists() {
                out.read_only(p);
            }
        }
    }
    if let Some(common) = commondir_of(gitdir)
        && common != gitdir
        && depth == 0
    {
        protect_gitdir(&common, writable, out, depth + 1);
    }
    let modules = gitdir.join("modules");
    if modules.is_dir() {
        if inside {
            out.pin(modules.clone());
        }
        protect_module_tree(&modules, writable, out, depth + 1);
    }
    let worktrees = gitdir.join("worktrees");
    if worktrees.is_dir() && inside {
        out.pin(worktrees.clone());
        for wt in list_dirs(&worktrees) {
            out.pin(wt.clone());
            for name in WORKTREE_REDIRECTS {
                let p = wt.join(name);
                if p.exists() {
                    out.read_only(p);
                }
            }
        }
    }
}

/// `modules/` holds submodule gitdirs, whose names may contain `/`: a folder with a `HEAD`
/// is a gitdir, any other folder is a level of a name and is searched further.
fn protect_module_tree(dir: &Path, writable: &[PathBuf], out: &mut Protection, depth: usize) {
    if depth > MAX_GITDIR_DEPTH {
        return;
    }
    for sub in list_dirs(dir) {
        if inside_any(&sub, writable) {
            out.pin(sub.clone());
        }
        if sub.join("HEAD").exists() {
            protect_gitdir(&sub, writable, out, depth);
        } else {
            protect_module_tree(&sub, writable, out, depth + 1);
        }
    }
}

/// An included config inside a writable root is read-only and refused to file tools; the
/// folders between the root and it are pinned, so it can't be swapped out with its folder.
/// One that does not exist yet is left to the audit.
fn protect_included(included: &Path, writable: &[PathBuf], out: &mut Protection) {
    if !inside_any(included, writable) {
        return;
    }
    out.deny(included.to_path_buf());
    if !included.exists() {
        return;
    }
    for dir in included.ancestors().skip(1) {
        if !inside_any(dir, writable) || writable.iter().any(|w| w == dir) {
            break;
        }
        out.pin(dir.to_path_buf());
    }
    out.read_only(included.to_path_buf());
}

/// A hooks directory inside a writable root is read-only; so is husky's `.husky/` around its
/// `_/` shims, since the shims run the scripts one level up with `sh`.
fn protect_hooks_path(hooks: &Path, writable: &[PathBuf], out: &mut Protection) {
    if !inside_any(hooks, writable) {
        return;
    }
    let mut targets = vec![hooks.to_path_buf()];
    if let Some(husky) = husky_dir(hooks) {
        targets.push(husky);
    }
    for t in targets {
        out.deny(t.clone());
        if t.exists() {
            out.read_only(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sandbox::git_guard::ws;

    #[test]
    fn submodule_and_worktree_gitdirs_are_protected_and_pinned() {
        let (_d, ws) = ws();
        let g = ws.join(".git");
        for d in ["hooks", "info", "modules/lib/a/hooks", "worktrees/w"] {
            std::fs::create_dir_all(g.join(d)).unwrap();
        }
        std::fs::write(g.join("config"), "").unwrap();
        std::fs::write(g.join("modules/lib/a/HEAD"), "x").unwrap();
        std::fs::write(g.join("modules/lib/a/config"), "").unwrap();
        std::fs::write(g.join("worktrees/w/commondir"), "../..").unwrap();
        let p = protection(&SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws));
        for ro in [
            "config",
            "hooks",
            "info",
            "modules/lib/a/config",
            "modules/lib/a/hooks",
            "worktrees/w/commondir",
        ] {
            assert!(p.read_only.contains(&g.join(ro)), "{ro}: {p:?}");
        }
        for pin in ["", "modules", "modules/lib", "modules/lib/a", "worktrees/w"] {
            let want = if pin.is_empty() {
                g.clone()
            } else {
                g.join(pin)
            };
            assert!(p.pinned.contains(&want), "{pin}: {p:?}");
        }
        assert!(p.denied.contains(&g.join("commondir")));
        assert!(p.denied.contains(&ws.join(".baton")));
    }

    #[test]
    fn a_relative_hooks_path_protects_husky() {
        let (_d, ws) = ws();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(ws.join(".husky/_")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = .husky/_\n").unwrap();
        let p = protection(&SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws));
        assert!(p.read_only.contains(&ws.join(".husky/_")), "{p:?}");
        assert!(p.read_only.contains(&ws.join(".husky")), "{p:?}");
    }
}
