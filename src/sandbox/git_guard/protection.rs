//! What the launcher pins read-only before a command starts, and what file tools refuse.

use std::path::{Path, PathBuf};

use super::gitdirs::{
    GitConfigs, MAX_GITDIR_DEPTH, MAX_MODULE_GITDIRS, commondir_of, gitdir_of, hooks_dirs,
    husky_dir, list_dirs, module_gitdirs,
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
    // Each list is made unique once at the end ([`Protection::drop_repeats`]): a check per
    // entry made the lists' cost grow with the square of what a repository holds.
    fn read_only(&mut self, p: PathBuf) {
        self.read_only.push(p);
    }
    fn pin(&mut self, p: PathBuf) {
        self.pinned.push(p);
    }
    fn drop_repeats(&mut self) {
        for list in [
            &mut self.read_only,
            &mut self.pinned,
            &mut self.denied,
            &mut self.shadowing,
        ] {
            hook_managers::drop_repeats(list);
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
        self.denied.push(p);
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
    let mut modules_left = MAX_MODULE_GITDIRS;
    repo_tops.extend(writable_ancestors(policy, &writable));
    // The user's own git settings, where they lie in a writable root: read-only like an
    // included file, whether or not a repository is in sight.
    for file in GitConfigs::user_files() {
        protect_included(&file, &writable, &mut out);
    }
    // So is whatever the home links into one (a dotfiles repository worked on with stow,
    // yadm or rcm, round 33): `~/.bashrc`, `~/.ssh/config`, `~/.local/bin/tool`, baton's
    // own `hooks.json` run or count outside the sandbox at the user's next shell, `ssh` or
    // session.
    for target in home_links_into(&writable) {
        protect_included(&target, &writable, &mut out);
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
            protect_gitdir(&gitdir, &writable, &mut out, 0, &mut modules_left);
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
            out.shadowing.extend(managed.shadowing);
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
    out.drop_repeats();
    // Parents before children: a pin must exist before a read-only bind beneath it.
    out.pinned.sort_by_key(|p| p.components().count());
    out
}

/// Guards `gitdir` and what it holds; `modules_left`: how many more submodule gitdirs may be
/// guarded one by one ([`MAX_MODULE_GITDIRS`] for the whole policy).
fn protect_gitdir(
    gitdir: &Path,
    writable: &[PathBuf],
    out: &mut Protection,
    depth: usize,
    modules_left: &mut usize,
) {
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
        protect_gitdir(&common, writable, out, depth + 1, modules_left);
    }
    let modules = gitdir.join("modules");
    if modules.is_dir() {
        match module_gitdirs(&modules, modules_left) {
            Some(tree) => {
                if inside {
                    out.pin(modules.clone());
                }
                for level in tree.levels.into_iter().filter(|l| inside_any(l, writable)) {
                    out.pin(level);
                }
                for sub in &tree.gitdirs {
                    protect_gitdir(sub, writable, out, depth + 1, modules_left);
                }
            }
            // Too many to pin one by one (a command can make thousands): none of them can
            // be changed by a command.
            None if inside => out.read_only(modules),
            None => {}
        }
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

/// Where the home's start-up links ([`crate::protocol::home_startup_link_targets`]) and the
/// entries of baton's own folders lead, when that is inside `writable`.
fn home_links_into(writable: &[PathBuf]) -> Vec<PathBuf> {
    // The home itself inside a writable root is refused as a workspace; its own folders
    // there are the user's to write.
    let skip = |folder: &Path| inside_any(folder, writable);
    let mut targets: Vec<PathBuf> = dirs::home_dir()
        .map(|h| crate::protocol::home_startup_link_targets(&h, skip))
        .unwrap_or_default();
    for own in crate::protocol::baton_own_dirs()
        .iter()
        .filter(|d| !skip(d))
    {
        let links = std::fs::read_dir(own).into_iter().flatten().flatten();
        targets.extend(
            links
                .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
                .filter_map(|e| e.path().canonicalize().ok()),
        );
    }
    // Never a writable root itself or a folder holding one: that would freeze the workspace.
    targets.retain(|t| inside_any(t, writable) && !writable.iter().any(|w| w.starts_with(t)));
    targets.dedup();
    targets
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
    fn more_submodule_gitdirs_than_can_be_pinned_make_modules_read_only_whole() {
        // Round 25 (low): 2,000 gitdirs a command made under `.git/modules` cost every later
        // command 17 s of pin computation and then "Argument list too long".
        let (_d, ws) = ws();
        let g = ws.join(".git");
        std::fs::create_dir_all(g.join("hooks")).unwrap();
        let nested = |n: usize| g.join(format!("modules/group/m{n}"));
        for n in 0..=MAX_MODULE_GITDIRS * 3 {
            std::fs::create_dir_all(nested(n).join("hooks")).unwrap();
            std::fs::write(nested(n).join("HEAD"), "x").unwrap();
            std::fs::write(nested(n).join("config"), "").unwrap();
        }
        let p = protection(&SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws));
        assert!(p.read_only.contains(&g.join("modules")), "{p:?}");
        assert!(p.pinned.len() < 8 && p.read_only.len() < 8, "{p:?}");
        assert!(p.denied.contains(&g.join("modules")));
        // At the bound, each is pinned and guarded by itself.
        for n in MAX_MODULE_GITDIRS..=MAX_MODULE_GITDIRS * 3 {
            std::fs::remove_dir_all(nested(n)).unwrap();
        }
        let p = protection(&SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws));
        assert!(!p.read_only.contains(&g.join("modules")), "{p:?}");
        for n in 0..MAX_MODULE_GITDIRS {
            assert!(p.pinned.contains(&nested(n)), "{n}");
            assert!(p.read_only.contains(&nested(n).join("config")), "{n}");
        }
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
