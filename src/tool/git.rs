//! `git`: status, diff (working tree / staged / against a revision), log, show, and a commit of
//! chosen paths, through git2 (no hooks run, nothing pushed, nothing forced — those operations
//! are simply not offered). Also the workspace diff a frontend shows for `/diff`.

use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;
use git2::{
    Delta, DiffFindOptions, DiffFormat, DiffOptions, Index, IndexAddOption, Repository, Signature,
    StatusOptions,
};
use serde::Deserialize;
use serde_json::json;

use crate::protocol::{ChangedFile, Event, FileChange, ToolSpec};
use crate::sandbox::visibility::Hidden;
use crate::tool::call::{cap_text, into_result, parse_args, run_blocking};
use crate::tool::path::resolve;
use crate::tool::{ApprovalNeed, Tool, ToolContext, ToolError, ToolResult};

const OUTPUT_CAP: usize = 64 * 1024;
const STATUS_CAP: usize = 500;
const LOG_DEFAULT: usize = 20;
const LOG_MAX: usize = 200;
/// Most bytes of `/diff` text: a frontend renders all of it, and a stray multi-gigabyte
/// untracked file must not stall it. The file list stays complete.
const WORKSPACE_DIFF_CAP: usize = 8 << 20;

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    Status,
    Diff,
    Log,
    Show,
    Commit,
}

#[derive(Deserialize)]
struct GitArgs {
    action: Action,
    #[serde(default)]
    staged: bool,
    #[serde(default)]
    rev: Option<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    max_count: Option<usize>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    repo: Option<String>,
}

pub struct GitTool;

impl Tool for GitTool {
    fn name(&self) -> &'static str {
        "git"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Inspect the git repository of the workspace, or commit. Actions:\n\
                - status: branch and changed files (porcelain XY codes; ?? = untracked).\n\
                - diff: unified diff. Default: working tree against the index, including \
                untracked files; staged=true: index against HEAD; rev='REV': working tree \
                against that revision (e.g. 'HEAD~1', 'main'). `paths` limits it.\n\
                - log: recent commits (max_count, default 20), from `rev` (default HEAD), \
                optionally only those touching `paths`.\n\
                - show: a commit's message and diff (rev, default HEAD), or a file at a \
                revision ('HEAD:src/lib.rs').\n\
                - commit: commit the current content of `paths` (files or directories, \
                required) with `message`; other staged changes stay staged. Hooks do not run.\n\
                `repo` names the repository's folder when it is not the workspace (e.g. a \
                clone in a subfolder). Paths are relative to the workspace. Pushing, resetting \
                and other force operations are not available."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["status", "diff", "log", "show", "commit"]},
                    "staged": {"type": "boolean", "description": "diff: compare the index with HEAD."},
                    "rev": {"type": "string", "description": "diff/log/show: a revision (commit id, branch, tag, HEAD~2, HEAD:path)."},
                    "paths": {"type": "array", "items": {"type": "string"}, "description": "diff/log: limit to these paths; commit: the paths to commit."},
                    "max_count": {"type": "integer", "minimum": 1, "maximum": LOG_MAX, "description": "log: number of commits (default 20)."},
                    "message": {"type": "string", "description": "commit: the commit message."},
                    "repo": {"type": "string", "description": "The repository's folder, relative to the workspace (default: the workspace's repository)."}
                },
                "required": ["action"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, args: &serde_json::Value, ctx: &ToolContext) -> ApprovalNeed {
        if args["action"].as_str() != Some("commit") {
            return ApprovalNeed::None;
        }
        let message = args["message"].as_str().unwrap_or("").to_string();
        let mut argv = vec![
            "git".to_string(),
            "commit".to_string(),
            "-m".to_string(),
            message,
            "--".to_string(),
        ];
        if let Some(paths) = args["paths"].as_array() {
            argv.extend(paths.iter().filter_map(|p| p.as_str()).map(String::from));
        }
        ApprovalNeed::Command {
            command: shlex::try_join(argv.iter().map(String::as_str))
                .unwrap_or_else(|_| argv.join(" ")),
            argv,
            cwd: ctx.workspace.display().to_string(),
        }
    }

    fn title(&self, args: &serde_json::Value) -> String {
        let action = args["action"].as_str().unwrap_or("?");
        match args["rev"].as_str() {
            Some(rev) => format!("git {action} {rev}"),
            None => format!("git {action}"),
        }
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        run_blocking(ctx, move |ctx| into_result(git(&args, ctx)))
    }
}

fn git(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let args: GitArgs = parse_args("git", args)?;
    let (start, shown) = match &args.repo {
        Some(folder) => {
            let r = resolve(&ctx.workspace, folder)?;
            if !r.abs.is_dir() {
                return Err(ToolError::NotFound {
                    path: r.rel,
                    what: "no such folder",
                });
            }
            (r.abs, r.rel)
        }
        None => (ctx.workspace.clone(), ctx.workspace.display().to_string()),
    };
    let shown = || shown.clone();
    // libgit2 opens the gitdir's files by name, blocking: a FIFO a command left there (its
    // index, HEAD, a branch's file) would hold baton for good.
    if let Some(file) = crate::untrusted_fs::gitdir_would_block_at(&start) {
        return Err(crate::tool::search::walk_blocked(&file, &ctx.workspace));
    }
    let repo =
        Repository::discover(&start).map_err(|_| ToolError::NotARepository { path: shown() })?;
    // A `.git` file a command left in a subfolder may point at any repository of the user's:
    // one named by `repo` is used only when its git data is inside the workspace.
    let found = Found {
        start: &start,
        workspace: &ctx.workspace,
        shown: &shown(),
        enclosing: false,
    };
    let (workdir, outside) = found.check(&repo)?;
    let pathspecs = args
        .paths
        .iter()
        .map(|p| repo_path(ctx, &workdir, p))
        .collect::<Result<Vec<_>, _>>()?;
    // Worked out before the confined thread starts: the sandbox's world reads the home, /run.
    let skip = crate::tool::path::tool_rules(&ctx.workspace)
        .hidden()
        .clone();
    let skip = &skip;
    // Status, diff and commit read the ignore and attributes files of every folder of the
    // work tree, by name: a FIFO a command made among them would hold baton for good.
    if matches!(args.action, Action::Status | Action::Diff | Action::Commit)
        && let Some(file) = crate::tool::search::first_blocking_file(&workdir)
    {
        return Err(crate::tool::search::walk_blocked(&file, &ctx.workspace));
    }
    let out = confined(&found, outside, |repo| match args.action {
        Action::Status => status(repo),
        Action::Diff => diff(repo, args.staged, args.rev.as_deref(), &pathspecs, skip),
        Action::Log => log(
            repo,
            args.rev.as_deref(),
            &pathspecs,
            args.max_count.unwrap_or(LOG_DEFAULT).clamp(1, LOG_MAX),
        ),
        Action::Show => show(repo, args.rev.as_deref().unwrap_or("HEAD")),
        Action::Commit => commit(
            repo,
            &pathspecs,
            args.message.as_deref().unwrap_or(""),
            skip,
        ),
    })
    .map_err(|e| match e {
        GitFailure::Git(source) => ToolError::Git {
            action: action_name(&args.action),
            source,
        },
        GitFailure::Tool(e) => e,
    })?;
    Ok(cap_text(out, OUTPUT_CAP))
}

fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Status => "status",
        Action::Diff => "diff",
        Action::Log => "log",
        Action::Show => "show",
        Action::Commit => "commit",
    }
}

/// A failure inside one action: a git2 error, named with the action once it reaches the top
/// (`ToolError::Git`), or an error that already says what went wrong.
enum GitFailure {
    Git(git2::Error),
    Tool(ToolError),
}

impl From<git2::Error> for GitFailure {
    fn from(e: git2::Error) -> Self {
        GitFailure::Git(e)
    }
}

impl From<ToolError> for GitFailure {
    fn from(e: ToolError) -> Self {
        GitFailure::Tool(e)
    }
}

/// A workspace path as a pathspec relative to the repository root (`` for the whole tree).
fn repo_path(ctx: &ToolContext, workdir: &Path, input: &str) -> Result<String, ToolError> {
    let resolved = resolve(&ctx.workspace, input)?;
    let rel = resolved
        .abs
        .strip_prefix(workdir)
        .map_err(|_| ToolError::OutsideRepository {
            path: input.to_string(),
            repository: workdir.display().to_string(),
        })?;
    let shown = crate::tool::path::display_relative(rel);
    Ok(if shown == "." { String::new() } else { shown })
}

fn branch_line(repo: &Repository) -> String {
    match repo.head() {
        Ok(head) => match head.shorthand() {
            Some(name) if head.is_branch() => format!("On branch {name}"),
            _ => format!(
                "HEAD detached at {}",
                head.target()
                    .map(|o| o.to_string()[..7].to_string())
                    .unwrap_or_default()
            ),
        },
        Err(_) => {
            let branch = repo
                .find_reference("HEAD")
                .ok()
                .and_then(|r| r.symbolic_target().map(String::from))
                .map(|t| t.trim_start_matches("refs/heads/").to_string())
                .unwrap_or_else(|| "?".into());
            format!("On branch {branch} (no commits yet)")
        }
    }
}

fn status(repo: &Repository) -> Result<String, GitFailure> {
    let mut options = StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .renames_head_to_index(true);
    let statuses = repo.statuses(Some(&mut options))?;
    let mut out = branch_line(repo);
    out.push('\n');
    if statuses.is_empty() {
        out.push_str("nothing to commit, working tree clean\n");
        return Ok(out);
    }
    for entry in statuses.iter().take(STATUS_CAP) {
        let s = entry.status();
        let path = entry.path().unwrap_or("?");
        let code = if s.is_wt_new() && !s.is_index_new() {
            "??".to_string()
        } else if s.is_conflicted() {
            "UU".to_string()
        } else {
            let index = if s.is_index_new() {
                'A'
            } else if s.is_index_modified() {
                'M'
            } else if s.is_index_deleted() {
                'D'
            } else if s.is_index_renamed() {
                'R'
            } else if s.is_index_typechange() {
                'T'
            } else {
                ' '
            };
            let tree = if s.is_wt_modified() {
                'M'
            } else if s.is_wt_deleted() {
                'D'
            } else if s.is_wt_typechange() {
                'T'
            } else if s.is_wt_renamed() {
                'R'
            } else {
                ' '
            };
            format!("{index}{tree}")
        };
        let renamed = entry
            .head_to_index()
            .filter(|_| s.is_index_renamed())
            .and_then(|d| d.old_file().path().map(|p| p.display().to_string()));
        match renamed {
            Some(from) => out.push_str(&format!("{code} {from} -> {path}\n")),
            None => out.push_str(&format!("{code} {path}\n")),
        }
    }
    if statuses.len() > STATUS_CAP {
        out.push_str(&format!(
            "[{} more entries not shown]\n",
            statuses.len() - STATUS_CAP
        ));
    }
    Ok(out)
}

fn diff_options(pathspecs: &[String]) -> DiffOptions {
    let mut options = DiffOptions::new();
    for spec in pathspecs.iter().filter(|s| !s.is_empty()) {
        options.pathspec(spec);
    }
    options
}

/// The patch of `diff`, leaving out the files for which `left_out` (a path relative to the
/// work tree) says so.
fn render_diff(diff: &git2::Diff, left_out: &dyn Fn(&Path) -> bool) -> Result<String, GitFailure> {
    let stats = diff.stats()?;
    let mut out = format!(
        "{} files changed, {} insertions(+), {} deletions(-)\n",
        stats.files_changed(),
        stats.insertions(),
        stats.deletions()
    );
    diff.print(DiffFormat::Patch, |delta, _hunk, line| {
        let paths = [delta.new_file().path(), delta.old_file().path()];
        if paths.into_iter().flatten().any(left_out) {
            return true;
        }
        let content = String::from_utf8_lossy(line.content());
        match line.origin() {
            origin @ ('+' | '-' | ' ') => {
                out.push(origin);
                out.push_str(&content);
            }
            _ => out.push_str(&content),
        }
        true
    })?;
    Ok(out)
}

fn head_tree(repo: &Repository) -> Option<git2::Tree<'_>> {
    repo.head().ok().and_then(|h| h.peel_to_tree().ok())
}

/// Work-tree files the model may not see (`WriteRules::hides`: what the sandbox hides from
/// commands, baton's own configuration) are left out of what reads the work tree: the diffs
/// against it, and what a commit stages. What is already in git's objects is not: commands
/// read those too.
fn diff(
    repo: &Repository,
    staged: bool,
    rev: Option<&str>,
    pathspecs: &[String],
    skip: &Hidden,
) -> Result<String, GitFailure> {
    let workdir = repo.workdir().map(Path::to_path_buf);
    let hidden = |rel: &Path| {
        workdir
            .as_ref()
            .is_some_and(|w| skip.hides(&w.join(rel)).is_some())
    };
    let mut options = diff_options(pathspecs);
    let diff = if staged {
        repo.diff_tree_to_index(head_tree(repo).as_ref(), None, Some(&mut options))?
    } else if let Some(rev) = rev {
        let tree = repo
            .revparse_single(rev)
            .and_then(|o| o.peel_to_tree())
            .map_err(|source| ToolError::UnknownRevision {
                rev: rev.to_string(),
                source,
            })?;
        repo.diff_tree_to_workdir_with_index(Some(&tree), Some(&mut options))?
    } else {
        options
            .include_untracked(true)
            .recurse_untracked_dirs(true)
            .show_untracked_content(true);
        repo.diff_index_to_workdir(None, Some(&mut options))?
    };
    if diff.deltas().len() == 0 {
        return Ok("no differences\n".into());
    }
    if staged {
        render_diff(&diff, &|_| false)
    } else {
        render_diff(&diff, &hidden)
    }
}

fn format_time(time: git2::Time) -> String {
    chrono::DateTime::from_timestamp(time.seconds(), 0)
        .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_default()
}

fn touches(repo: &Repository, commit: &git2::Commit, pathspecs: &[String]) -> bool {
    if pathspecs.iter().all(|s| s.is_empty()) {
        return true;
    }
    let tree = commit.tree().ok();
    let parent_tree = commit.parent(0).ok().and_then(|p| p.tree().ok());
    let mut options = diff_options(pathspecs);
    repo.diff_tree_to_tree(parent_tree.as_ref(), tree.as_ref(), Some(&mut options))
        .is_ok_and(|d| d.deltas().len() > 0)
}

fn log(
    repo: &Repository,
    rev: Option<&str>,
    pathspecs: &[String],
    max_count: usize,
) -> Result<String, GitFailure> {
    let start = match rev {
        Some(rev) => repo
            .revparse_single(rev)
            .and_then(|o| o.peel_to_commit())
            .map_err(|source| ToolError::UnknownRevision {
                rev: rev.to_string(),
                source,
            })?
            .id(),
        None => match repo.head().ok().and_then(|h| h.target()) {
            Some(id) => id,
            None => return Ok(format!("{}\nno commits yet\n", branch_line(repo))),
        },
    };
    let mut walk = repo.revwalk()?;
    walk.push(start)?;
    walk.set_sorting(git2::Sort::TIME)?;
    let mut out = String::new();
    let mut shown = 0;
    for id in walk {
        let commit = repo.find_commit(id?)?;
        if !touches(repo, &commit, pathspecs) {
            continue;
        }
        out.push_str(&format!(
            "{} {} {} {}\n",
            &commit.id().to_string()[..10],
            format_time(commit.time()),
            commit.author().name().unwrap_or("?"),
            commit.summary().unwrap_or("")
        ));
        shown += 1;
        if shown >= max_count {
            break;
        }
    }
    if out.is_empty() {
        out.push_str("no commits match\n");
    }
    Ok(out)
}

fn show(repo: &Repository, rev: &str) -> Result<String, GitFailure> {
    let object = repo
        .revparse_single(rev)
        .map_err(|source| ToolError::UnknownRevision {
            rev: rev.to_string(),
            source,
        })?;
    if let Some(blob) = object.as_blob() {
        if blob.is_binary() {
            return Ok(format!("{rev} is a binary file ({} bytes)\n", blob.size()));
        }
        return Ok(String::from_utf8_lossy(blob.content()).into_owned());
    }
    let commit = object
        .peel_to_commit()
        .map_err(|_| ToolError::invalid_argument(format!("'{rev}' is not a commit or a file")))?;
    let author = commit.author();
    let mut out = format!(
        "commit {}\nAuthor: {} <{}>\nDate:   {}\n\n",
        commit.id(),
        author.name().unwrap_or("?"),
        author.email().unwrap_or("?"),
        format_time(commit.time())
    );
    for line in commit.message().unwrap_or("").lines() {
        out.push_str(&format!("    {line}\n"));
    }
    out.push('\n');
    let tree = commit.tree()?;
    let parent_tree = commit.parent(0).ok().and_then(|p| p.tree().ok());
    let diff = repo.diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None)?;
    out.push_str(&render_diff(&diff, &|_| false)?);
    Ok(out)
}

fn under(path: &Path, spec: &str) -> bool {
    spec.is_empty() || path.starts_with(spec)
}

/// The repository's git data (its gitdir and the common dir holding objects, refs and config),
/// which the tool reads and a commit writes: inside the workspace, or, for a linked worktree
/// (`git worktree add`), the main repository's own, which names this work tree back (and,
/// when `enclosing`, the repository the workspace is a folder of). A
/// `.git` file or a `commondir` a cloned repository or a command left may name any repository
/// of the user's.
fn git_data_inside(
    repo: &Repository,
    workspace: &Path,
    shown: &str,
    enclosing: bool,
) -> Result<Vec<PathBuf>, ToolError> {
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let real = |d: &Path| std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf());
    let (gitdir, common) = (real(repo.path()), real(repo.commondir()));
    if gitdir.starts_with(&workspace) && common.starts_with(&workspace) {
        return Ok(Vec::new());
    }
    // A linked worktree: its gitdir is `COMMON/worktrees/NAME`, whose `gitdir` file names the
    // `.git` file of a work tree in the workspace.
    let named_back = std::fs::read_to_string(gitdir.join("gitdir"))
        .ok()
        .map(|t| real(Path::new(t.trim())))
        .is_some_and(|dot_git| dot_git.starts_with(&workspace));
    let linked = gitdir.parent() == Some(&common.join("worktrees")) && named_back;
    // The repository the workspace is a folder of, laid out as git lays it out: its `.git`
    // folder in its work tree, no `commondir` elsewhere.
    let work_tree = repo.workdir().map(real);
    let holds_the_workspace = enclosing
        && common == gitdir
        && gitdir
            .parent()
            .is_some_and(|w| work_tree.as_deref() == Some(w) && workspace.starts_with(w));
    if linked || holds_the_workspace {
        return Ok([gitdir, common]
            .into_iter()
            .filter(|d| !d.starts_with(&workspace))
            .collect());
    }
    let outside = if gitdir.starts_with(&workspace) {
        common
    } else {
        gitdir
    };
    Err(ToolError::RepositoryOutsideWorkspace {
        path: shown.to_string(),
        gitdir: outside.display().to_string(),
    })
}

/// The repository's work tree, which the tool reads (status, diffs): one in the workspace, or,
/// when `enclosing` (what `/diff` shows the user), the repository the workspace is a folder
/// of, laid out as git lays it out (the work tree holds its `.git`). A `core.worktree` that a
/// cloned repository or a command set would otherwise show the model any folder of the
/// user's (`~/.ssh`); a repository at `~` holding the workspace, the whole home.
fn work_tree_inside(
    repo: &Repository,
    workspace: &Path,
    shown: &str,
    enclosing: bool,
) -> Result<PathBuf, ToolError> {
    let workdir = repo
        .workdir()
        .and_then(|w| std::fs::canonicalize(w).ok())
        .ok_or_else(|| ToolError::BareRepository {
            path: shown.to_string(),
        })?;
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let holds_its_gitdir =
        || std::fs::canonicalize(repo.path()).is_ok_and(|g| g == workdir.join(".git"));
    let inside = workdir.starts_with(&workspace);
    let holds_the_workspace = enclosing && workspace.starts_with(&workdir) && holds_its_gitdir();
    if !inside && !holds_the_workspace {
        return Err(ToolError::WorkTreeOutsideWorkspace {
            path: shown.to_string(),
            worktree: workdir.display().to_string(),
        });
    }
    Ok(workdir)
}

/// Where an action's repository was found, and how it is checked.
struct Found<'a> {
    /// The folder the repository was discovered from.
    start: &'a Path,
    workspace: &'a Path,
    shown: &'a str,
    /// Whether the repository the workspace is a folder of may be used (`/diff`).
    enclosing: bool,
}

impl Found<'_> {
    /// The repository's work tree, and the folders of its git data outside the workspace
    /// that the checks allow, or why it may not be used.
    fn check(&self, repo: &Repository) -> Result<(PathBuf, Vec<PathBuf>), ToolError> {
        let mut outside = git_data_inside(repo, self.workspace, self.shown, self.enclosing)?;
        let workdir = work_tree_inside(repo, self.workspace, self.shown, self.enclosing)?;
        let workspace =
            std::fs::canonicalize(self.workspace).unwrap_or_else(|_| self.workspace.to_path_buf());
        if !workdir.starts_with(&workspace) {
            outside.push(workdir.clone());
        }
        Ok((workdir, outside))
    }
}

/// Runs `work` on the repository, opened afresh on a thread of its own whose reads and writes
/// Landlock keeps inside the workspace, the folders outside it that the checks allowed
/// (`outside`: a linked worktree's main repository, the repository the workspace is a folder
/// of), and git's own settings files. The tool runs in baton's process, outside the sandbox,
/// and a repository is laid out by whoever wrote it: objects, alternates and refs may be links
/// to another repository of the user's, a work-tree file a link that git reads through
/// (`core.symlinks = false`), and libgit2 appends to `logs/HEAD` and creates loose objects
/// through links in `.git`, which would put a line of the model's choosing into any file of
/// the user's. A command may also swap a `.git` for a link to another repository between the
/// checks and the opening: the thread opens and checks the repository again, and the rules
/// never name a folder the swap chose.
fn confined<T: Send>(
    found: &Found,
    outside: Vec<PathBuf>,
    work: impl FnOnce(&Repository) -> Result<T, GitFailure> + Send,
) -> Result<T, GitFailure> {
    let workspace =
        std::fs::canonicalize(found.workspace).unwrap_or_else(|_| found.workspace.to_path_buf());
    let mut roots = vec![workspace];
    roots.extend(outside);
    let settings = git_settings_files();
    crate::tool::confined::run_confined(&settings, &roots, || {
        let repo = Repository::discover(found.start).map_err(|_| {
            GitFailure::Tool(ToolError::NotARepository {
                path: found.shown.to_string(),
            })
        })?;
        found.check(&repo)?;
        work(&repo)
    })
    .map_err(GitFailure::Tool)?
}

/// The user's and the system's git settings, and the ignore and attributes files they name:
/// what libgit2 reads besides the repository.
fn git_settings_files() -> Vec<PathBuf> {
    let mut files = vec![
        PathBuf::from("/etc/gitconfig"),
        PathBuf::from("/etc/gitattributes"),
    ];
    // Git's own files of the XDG folder, not the folder: it holds `credentials` too.
    let xdg_git =
        |dir: PathBuf| ["config", "ignore", "attributes"].map(|f| dir.join("git").join(f));
    if let Some(home) = dirs::home_dir() {
        files.push(home.join(".gitconfig"));
        files.extend(xdg_git(home.join(".config")));
    }
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        files.extend(xdg_git(xdg));
    }
    if let Ok(config) = git2::Config::open_default() {
        for key in ["core.excludesfile", "core.attributesfile"] {
            if let Ok(p) = config.get_path(key) {
                files.push(p);
            }
        }
        if let Some(home) = dirs::home_dir() {
            files.extend(included_settings(&config, &home));
        }
    }
    files
}

/// The files the user's and the system's git settings include (`include.path`,
/// `includeIf.*.path`: a `~/.gitconfig.local` of machine-specific settings): libgit2 reads
/// them when it opens a repository. Relative paths are taken from the home, where the user's
/// `~/.gitconfig` lies.
fn included_settings(config: &git2::Config, home: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(mut entries) = config.entries(Some(r"^include(if\..*)?\.path$")) else {
        return out;
    };
    while let Some(Ok(entry)) = entries.next() {
        let Some(value) = entry.value() else {
            continue;
        };
        out.push(match value.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => home.join(value),
        });
    }
    out
}

/// Refuses to commit where a file the commit writes — the index, the branch's ref and the
/// reflogs of HEAD and the branch — or a folder on the way to one is a link inside the
/// gitdir: libgit2 appends a reflog line through a link, and the thread's confinement allows
/// every path of the gitdir, a hook included (a link `logs/HEAD -> ../hooks/post-commit` that
/// a command still running made). Links a command leaves there are removed by the audit
/// when it ends; until then the commit waits.
fn refuse_links_where_git_writes(repo: &Repository) -> Result<(), GitFailure> {
    let gitdir = repo.path();
    let branch = repo
        .find_reference("HEAD")
        .ok()
        .and_then(|h| h.symbolic_target().map(str::to_string));
    let mut written = vec!["index".to_string(), "logs/HEAD".to_string()];
    if let Some(b) = branch.filter(|b| b.starts_with("refs/")) {
        written.push(format!("logs/{b}"));
        written.push(b);
    }
    for rel in written {
        let mut at = gitdir.to_path_buf();
        for part in Path::new(&rel).components() {
            at.push(part);
            if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(ToolError::rejected(format!(
                    "{} is a link (a command made it): git would write where it leads; the \
                     audit removes such links when the command that made them ends, commit \
                     after that",
                    at.display()
                ))
                .into());
            }
        }
    }
    Ok(())
}

fn commit(
    repo: &Repository,
    pathspecs: &[String],
    message: &str,
    skip: &Hidden,
) -> Result<String, GitFailure> {
    if message.trim().is_empty() {
        return Err(ToolError::invalid_argument("commit needs a non-empty message").into());
    }
    if pathspecs.is_empty() {
        return Err(ToolError::invalid_argument(
            "commit needs `paths`: the files or directories to commit",
        )
        .into());
    }
    // Stage the chosen paths in the real index (additions, changes and deletions) …
    let specs: Vec<&str> = pathspecs
        .iter()
        .map(|s| if s.is_empty() { "*" } else { s.as_str() })
        .collect();
    let mut index = repo.index()?;
    // A work-tree file the model may not see is not staged, new or changed (0 stages, 1
    // skips).
    let workdir = repo.workdir().map(Path::to_path_buf);
    let mut not_hidden = |path: &Path, _spec: &[u8]| -> i32 {
        let hidden = workdir
            .as_ref()
            .is_some_and(|w| skip.hides(&w.join(path)).is_some());
        i32::from(hidden)
    };
    refuse_links_where_git_writes(repo)?;
    index.add_all(
        specs.iter(),
        IndexAddOption::DEFAULT,
        Some(&mut not_hidden as &mut git2::IndexMatchedPath),
    )?;
    index.update_all(
        specs.iter(),
        Some(&mut not_hidden as &mut git2::IndexMatchedPath),
    )?;
    index.write()?;
    // … and build the commit from HEAD plus only those paths, like `git commit -- paths`.
    let head = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let mut chosen = Index::new()?;
    if let Some(head) = &head {
        chosen.read_tree(&head.tree()?)?;
    }
    let stale: Vec<PathBuf> = chosen
        .iter()
        .map(|e| PathBuf::from(String::from_utf8_lossy(&e.path).into_owned()))
        .filter(|p| pathspecs.iter().any(|s| under(p, s)))
        .collect();
    for path in stale {
        chosen.remove_path(&path)?;
    }
    for entry in index.iter() {
        let path = PathBuf::from(String::from_utf8_lossy(&entry.path).into_owned());
        if pathspecs.iter().any(|s| under(&path, s)) {
            chosen.add(&entry)?;
        }
    }
    let tree_id = chosen.write_tree_to(repo)?;
    if head.as_ref().is_some_and(|h| h.tree_id() == tree_id) {
        return Err(ToolError::rejected(format!(
            "nothing to commit: {} unchanged since HEAD",
            pathspecs.join(", ")
        ))
        .into());
    }
    let tree = repo.find_tree(tree_id)?;
    let signature = repo
        .signature()
        .or_else(|_| Signature::now("baton", "baton@localhost"))?;
    let parents: Vec<&git2::Commit> = head.iter().collect();
    let id = repo.commit(
        Some("HEAD"),
        &signature,
        &signature,
        message,
        &tree,
        &parents,
    )?;
    let parent_tree = head.as_ref().and_then(|h| h.tree().ok());
    let stats = repo
        .diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None)?
        .stats()?;
    Ok(format!(
        "[{}] committed {}: {}\n{} files changed, {} insertions(+), {} deletions(-)\n",
        branch_line(repo).trim_start_matches("On branch "),
        &id.to_string()[..10],
        message.lines().next().unwrap_or(""),
        stats.files_changed(),
        stats.insertions(),
        stats.deletions()
    ))
}

/// What `/diff` shows (`Op::WorkspaceDiff`): every change against HEAD, staged or not, as
/// `git diff HEAD` shows it (renames found), then every untracked, non-ignored file as a new
/// file. A repository without commits is compared with the empty tree.
pub fn workspace_diff(workspace: &Path) -> Result<(Vec<ChangedFile>, String), ToolError> {
    let shown = || workspace.display().to_string();
    let repo =
        Repository::discover(workspace).map_err(|_| ToolError::NotARepository { path: shown() })?;
    // What `/diff` shows goes to the user, not to the model: the repository the workspace
    // is a folder of is shown whole, as `git diff` there would.
    let found = Found {
        start: workspace,
        workspace,
        shown: &shown(),
        enclosing: true,
    };
    let (_, outside) = found.check(&repo)?;
    confined(&found, outside, |repo| Ok(diff_of_workspace(repo))).map_err(|e| match e {
        GitFailure::Git(source) => ToolError::Git {
            action: "diff",
            source,
        },
        GitFailure::Tool(e) => e,
    })?
}

fn diff_of_workspace(repo: &Repository) -> Result<(Vec<ChangedFile>, String), ToolError> {
    let failed = |source: git2::Error| ToolError::Git {
        action: "diff",
        source,
    };
    let mut tracked = repo
        .diff_tree_to_workdir_with_index(head_tree(repo).as_ref(), None)
        .map_err(failed)?;
    tracked
        .find_similar(Some(DiffFindOptions::new().renames(true)))
        .map_err(failed)?;
    // Untracked files come from a second diff so that, as with git, a deleted file and a new
    // untracked one are never paired up as a rename.
    let mut options = DiffOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true);
    let untracked = repo
        .diff_index_to_workdir(None, Some(&mut options))
        .map_err(failed)?;
    let mut files = Vec::new();
    let mut text = String::new();
    let mut cut = false;
    for (diff, only_untracked) in [(&tracked, false), (&untracked, true)] {
        files.extend(
            diff.deltas()
                .filter(|d| !only_untracked || d.status() == Delta::Untracked)
                .filter_map(|d| changed_file(&d)),
        );
        if cut {
            continue;
        }
        let printed = diff.print(DiffFormat::Patch, |delta, _hunk, line| {
            if only_untracked && delta.status() != Delta::Untracked {
                return true;
            }
            if text.len() >= WORKSPACE_DIFF_CAP {
                cut = true;
                return false;
            }
            if matches!(line.origin(), '+' | '-' | ' ') {
                text.push(line.origin());
            }
            text.push_str(&String::from_utf8_lossy(line.content()));
            true
        });
        if !cut {
            printed.map_err(failed)?;
        }
    }
    if cut {
        text.push_str(&format!(
            "\n[diff cut at {} MiB; {} files changed in all]\n",
            WORKSPACE_DIFF_CAP >> 20,
            files.len()
        ));
    }
    Ok((files, text))
}

fn changed_file(delta: &git2::DiffDelta) -> Option<ChangedFile> {
    let change = match delta.status() {
        Delta::Added | Delta::Copied => FileChange::Added,
        Delta::Modified | Delta::Conflicted => FileChange::Modified,
        Delta::Deleted => FileChange::Deleted,
        Delta::Renamed => FileChange::Renamed,
        Delta::Typechange => FileChange::TypeChanged,
        Delta::Untracked => FileChange::Untracked,
        Delta::Unmodified | Delta::Ignored | Delta::Unreadable => return None,
    };
    let name = |f: git2::DiffFile| f.path().map(|p| p.to_string_lossy().into_owned());
    let path = name(delta.new_file()).or_else(|| name(delta.old_file()))?;
    let old_path = (change == FileChange::Renamed)
        .then(|| name(delta.old_file()))
        .flatten();
    Some(ChangedFile {
        path,
        change,
        old_path,
    })
}

/// `workspace_diff` as the event that answers `Op::WorkspaceDiff`.
pub fn workspace_diff_event(workspace: &Path) -> Event {
    match workspace_diff(workspace) {
        Ok((files, diff)) => Event::WorkspaceDiff {
            files,
            diff,
            error: None,
        },
        Err(e) => Event::WorkspaceDiff {
            files: Vec::new(),
            diff: String::new(),
            error: Some(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn files_the_users_git_settings_include_are_read_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("gitconfig");
        std::fs::write(
            &file,
            "[include]\n\tpath = ~/.gitconfig.local\n[includeIf \"gitdir:~/work/\"]\n\tpath = work.inc\n",
        )
        .expect("config");
        let config = git2::Config::open(&file).expect("open");
        let home = std::path::Path::new("/home/u");
        let files = super::included_settings(&config, home);
        assert!(files.contains(&home.join(".gitconfig.local")), "{files:?}");
        assert!(files.contains(&home.join("work.inc")), "{files:?}");
    }

    #[test]
    fn the_git_thread_reads_gits_own_settings_not_the_folder_with_its_credentials() {
        let files = super::git_settings_files();
        let home = dirs::home_dir().expect("home");
        assert!(
            files.contains(&home.join(".config/git/config")),
            "{files:?}"
        );
        assert!(!files.contains(&home.join(".config/git")), "{files:?}");
        assert!(
            files
                .iter()
                .all(|f| f.file_name() != Some(std::ffi::OsStr::new("credentials"))),
            "{files:?}"
        );
    }
}
