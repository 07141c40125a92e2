//! Read-only search tools over the `ignore` walker (so .gitignore is respected): `list_dir`
//! (a depth-limited tree), `glob` (file names by pattern) and `grep` (a parallel regex search
//! that skips binary files and caps its results with a count of what it left out).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use crate::protocol::ToolSpec;
use crate::sandbox::visibility::Hidden;
use crate::tool::call::{clip_line, into_result, parse_args, run_blocking};
use crate::tool::path::{display_relative, resolve_visible, tool_rules};
use crate::tool::{ApprovalNeed, Tool, ToolContext, ToolError, ToolResult};

/// Most entries `list_dir` shows.
pub const LIST_DIR_CAP: usize = 400;
/// Most paths `glob` returns.
pub const GLOB_CAP: usize = 500;
/// Default and largest number of matching lines `grep` returns.
pub const GREP_DEFAULT_RESULTS: usize = 200;
pub const GREP_MAX_RESULTS: usize = 2000;
/// Files larger than this are not searched by `grep`.
pub const GREP_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

fn default_dot() -> String {
    ".".into()
}

/// A walk of `root` that leaves out `.git` and what `skip` hides (credentials the sandbox
/// hides from commands, baton's own configuration): those are neither listed nor read.
/// `hidden`: also dot-files.
fn walker(root: &Path, hidden: bool, skip: Hidden) -> ignore::WalkBuilder {
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .hidden(!hidden)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            e.file_name() != ".git" && skip.hides(e.path()).is_none() && walkable(e)
        });
    builder
}

/// Whether the walker may enter `entry` (anything but a folder whose ignore files it would
/// block on: see [`crate::untrusted_fs::walker_would_block_in`]).
pub(crate) fn walkable(entry: &ignore::DirEntry) -> bool {
    !entry.file_type().is_some_and(|t| t.is_dir())
        || crate::untrusted_fs::walker_would_block_in(entry.path()).is_none()
}

/// The first file in `root` or below it (or in a folder above it) that a walk, or git's look
/// at the work tree, would block on (see [`crate::untrusted_fs::walker_would_block_in`]).
pub(crate) fn first_blocking_file(root: &Path) -> Option<PathBuf> {
    if let Some(file) = crate::untrusted_fs::walk_would_block_at(root) {
        return Some(file);
    }
    let found = std::sync::Arc::new(Mutex::new(None::<PathBuf>));
    let seen = found.clone();
    for _ in ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            if e.file_name() == ".git" {
                return false;
            }
            if !e.file_type().is_some_and(|t| t.is_dir()) {
                return true;
            }
            let blocking = crate::untrusted_fs::walker_would_block_in(e.path());
            let enter = blocking.is_none();
            if let Some(file) = blocking {
                seen.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(file);
            }
            enter
        })
        .build()
    {
        if found.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            break;
        }
    }
    found.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// Refuses a walk of `root` whose own ignore files, or those of a folder above it, the
/// walker would block on.
pub(crate) fn refuse_a_blocking_walk(root: &Path, workspace: &Path) -> Result<(), ToolError> {
    match crate::untrusted_fs::walk_would_block_at(root) {
        Some(file) => Err(walk_blocked(&file, workspace)),
        None => Ok(()),
    }
}

/// The refusal for `file`, a file a walk or git would block on, named as the model sees it.
pub(crate) fn walk_blocked(file: &Path, workspace: &Path) -> ToolError {
    ToolError::WalkBlocked {
        path: display_relative(file.strip_prefix(workspace).unwrap_or(file)),
    }
}

/// The path of `entry` relative to the workspace, for display.
fn shown(workspace_root: &Path, path: &Path) -> String {
    display_relative(path.strip_prefix(workspace_root).unwrap_or(path))
}

fn workspace_root(ctx: &ToolContext) -> PathBuf {
    std::fs::canonicalize(&ctx.workspace).unwrap_or_else(|_| ctx.workspace.clone())
}

// ---------------------------------------------------------------------------------------------
// list_dir

#[derive(Deserialize)]
struct ListArgs {
    #[serde(default = "default_dot")]
    path: String,
    #[serde(default)]
    depth: Option<usize>,
    #[serde(default)]
    hidden: bool,
}

pub struct ListDirTool;

impl Tool for ListDirTool {
    fn name(&self) -> &'static str {
        "list_dir"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "List a directory of the workspace as an indented tree (directories end with \
                 '/'). Files ignored by .gitignore and the .git directory are left out. `depth` \
                 is how many levels to descend (default 2, at most 8). At most {LIST_DIR_CAP} \
                 entries are shown; list a subdirectory to see more."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory relative to the workspace root (default '.')."},
                    "depth": {"type": "integer", "minimum": 1, "maximum": 8, "description": "Levels to descend (default 2)."},
                    "hidden": {"type": "boolean", "description": "Also show hidden (dot) files and directories (default false)."}
                },
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, _args: &serde_json::Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &serde_json::Value) -> String {
        format!("list {}", args["path"].as_str().unwrap_or("."))
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        run_blocking(ctx, move |ctx| into_result(list_dir(&args, ctx)))
    }
}

fn list_dir(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let args: ListArgs = parse_args("list_dir", args)?;
    let rules = tool_rules(&ctx.workspace);
    let target = resolve_visible(&ctx.workspace, &args.path, &rules)?;
    if !target.abs.is_dir() {
        return Err(ToolError::rejected(format!(
            "{} is not a directory",
            target.rel
        )));
    }
    let depth = args.depth.unwrap_or(2).clamp(1, 8);
    let skip = rules.hidden().clone();
    refuse_a_blocking_walk(&target.abs, &workspace_root(ctx))?;
    crate::tool::confined::walk_confined(&ctx.workspace, || {
        list_tree(&target.abs, &target.rel, depth, args.hidden, skip)
    })
}

/// The indented tree under `abs` (shown as `rel`), `depth` levels deep.
fn list_tree(abs: &Path, rel: &str, depth: usize, hidden: bool, skip: Hidden) -> String {
    let walk = walker(abs, hidden, skip)
        .max_depth(Some(depth))
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    let mut out = format!("{rel}/\n");
    let mut shown_entries = 0usize;
    let mut dropped = 0usize;
    for entry in walk.flatten() {
        if entry.depth() == 0 {
            continue;
        }
        if shown_entries >= LIST_DIR_CAP {
            dropped += 1;
            continue;
        }
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        let is_link = entry.path_is_symlink();
        let name = entry.file_name().to_string_lossy();
        let indent = "  ".repeat(entry.depth());
        let suffix = if is_dir {
            "/"
        } else if is_link {
            "@"
        } else {
            ""
        };
        out.push_str(&format!("{indent}{name}{suffix}\n"));
        shown_entries += 1;
    }
    if shown_entries == 0 {
        out.push_str("  (empty)\n");
    }
    if dropped > 0 {
        out.push_str(&format!(
            "[{dropped} more entries not shown; list a subdirectory or lower depth]\n"
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// glob

#[derive(Deserialize)]
struct GlobArgs {
    pattern: String,
    #[serde(default = "default_dot")]
    path: String,
}

pub struct GlobTool;

impl Tool for GlobTool {
    fn name(&self) -> &'static str {
        "glob"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "Find files by name pattern, e.g. '**/*.rs' or 'src/**/test_*.py'. `*` matches \
                 within one path component, `**` across directories, `{{a,b}}` alternatives. A \
                 pattern without '/' matches file names at any depth ('*.toml'). Paths are \
                 matched relative to `path` and returned relative to the workspace, sorted; \
                 .gitignored and hidden files are skipped. At most {GLOB_CAP} results."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob pattern."},
                    "path": {"type": "string", "description": "Directory to search in, relative to the workspace root (default '.')."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, _args: &serde_json::Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &serde_json::Value) -> String {
        format!("glob {}", args["pattern"].as_str().unwrap_or("?"))
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        run_blocking(ctx, move |ctx| into_result(glob_files(&args, ctx)))
    }
}

fn glob_files(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let args: GlobArgs = parse_args("glob", args)?;
    let rules = tool_rules(&ctx.workspace);
    let target = resolve_visible(&ctx.workspace, &args.path, &rules)?;
    let skip = rules.hidden().clone();
    if !target.abs.is_dir() {
        return Err(ToolError::rejected(format!(
            "{} is not a directory",
            target.rel
        )));
    }
    let pattern = args.pattern.trim().trim_start_matches("./");
    let by_name = !pattern.contains('/');
    let matcher = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|source| ToolError::Glob {
            pattern: pattern.to_string(),
            source,
        })?
        .compile_matcher();
    let root = workspace_root(ctx);
    refuse_a_blocking_walk(&target.abs, &root)?;
    let mut found = crate::tool::confined::walk_confined(&ctx.workspace, || {
        let mut found = Vec::new();
        for entry in walker(&target.abs, false, skip).build().flatten() {
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let Ok(rel) = entry.path().strip_prefix(&target.abs) else {
                continue;
            };
            let hit = if by_name {
                matcher.is_match(entry.file_name())
            } else {
                matcher.is_match(rel)
            };
            if hit {
                found.push(shown(&root, entry.path()));
            }
        }
        found
    })?;
    found.sort();
    let total = found.len();
    if total == 0 {
        return Ok(format!("no files match '{pattern}' in {}", target.rel));
    }
    let mut out = found
        .into_iter()
        .take(GLOB_CAP)
        .collect::<Vec<_>>()
        .join("\n");
    out.push('\n');
    if total > GLOB_CAP {
        out.push_str(&format!(
            "[{} more files not shown ({total} matched); use a narrower pattern]\n",
            total - GLOB_CAP
        ));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// grep

/// A grep request (also used directly by the benchmark).
#[derive(Debug, Clone)]
pub struct GrepOptions {
    pub pattern: String,
    pub case_insensitive: bool,
    pub literal: bool,
    /// Only files whose name (or relative path, with '/') matches this glob.
    pub glob: Option<String>,
    pub hidden: bool,
    pub max_results: usize,
    /// Lines shown before and after each matching line (0: none).
    pub context: usize,
    /// Stops the walk early (the turn was interrupted); the report then covers what was seen.
    pub cancel: Option<tokio_util::sync::CancellationToken>,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineHit {
    /// 1-based.
    pub line: usize,
    /// The line without its ending, cut at 300 characters.
    pub text: String,
}

/// The matching lines of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHits {
    pub path: PathBuf,
    pub lines: Vec<LineHit>,
    /// With `context`: the lines around the kept matches that are not matches themselves.
    pub context: Vec<LineHit>,
}

/// What a search found: the first `max_results` matching lines in path order, grouped by
/// file, and the true totals.
#[derive(Debug, Clone, Default)]
pub struct GrepReport {
    pub files: Vec<FileHits>,
    /// Lines in `files` (at most `max_results`).
    pub shown_lines: usize,
    pub total_lines: usize,
    pub files_matched: usize,
    pub files_searched: usize,
    pub binary_skipped: usize,
}

/// Searches every non-ignored, non-binary file under `root` in parallel.
/// What the sandbox hides from commands under `root` (the file tools' rules of that folder)
/// is left out.
pub fn grep_search(root: &Path, options: &GrepOptions) -> Result<GrepReport, ToolError> {
    let skip = tool_rules(root).hidden().clone();
    grep_search_on(root, options, search_threads(), skip)
}

/// How many threads grep's walk uses: the CPUs this process may use, at most 12. Decided
/// before the walk is confined, since the cgroup's CPU quota is read from `/proc` and `/sys`,
/// which the confined walk may not read.
fn search_threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get().min(12))
}

/// [`grep_search`] with `threads` walker threads.
fn grep_search_on(
    root: &Path,
    options: &GrepOptions,
    threads: usize,
    skip: Hidden,
) -> Result<GrepReport, ToolError> {
    let source = if options.literal {
        regex::escape(&options.pattern)
    } else {
        options.pattern.clone()
    };
    let regex = regex::bytes::RegexBuilder::new(&source)
        .case_insensitive(options.case_insensitive)
        .multi_line(true)
        .build()
        .map_err(|source| ToolError::Regex {
            pattern: options.pattern.clone(),
            source,
        })?;
    let filter = match &options.glob {
        Some(glob) => {
            let matcher = globset::GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .map_err(|source| ToolError::Glob {
                    pattern: glob.clone(),
                    source,
                })?
                .compile_matcher();
            Some((matcher, glob.contains('/')))
        }
        None => None,
    };
    let per_file_cap = options.max_results.max(1);
    let hits: Mutex<Vec<FileHits>> = Mutex::new(Vec::new());
    let total_lines = AtomicUsize::new(0);
    let files_matched = AtomicUsize::new(0);
    let files_searched = AtomicUsize::new(0);
    let binary_skipped = AtomicUsize::new(0);
    let single_file = root.is_file();
    // Every file is opened beneath this folder, held open: a folder swapped for a link while
    // the walk runs is not followed out of the workspace.
    let anchor_path = if single_file {
        root.parent().unwrap_or(root)
    } else {
        root
    };
    let anchor = crate::untrusted_fs::Dir::open(anchor_path).map_err(|e| {
        ToolError::io(
            crate::tool::IoOp::Open,
            anchor_path.display().to_string(),
            e,
        )
    })?;
    walker(root, options.hidden, skip)
        .threads(threads)
        .build_parallel()
        .run(|| {
            let regex = &regex;
            let filter = &filter;
            let hits = &hits;
            let (total_lines, files_matched) = (&total_lines, &files_matched);
            let (files_searched, binary_skipped) = (&files_searched, &binary_skipped);
            let cancel = options.cancel.as_ref();
            let (anchor, anchor_path) = (&anchor, anchor_path);
            Box::new(move |entry| {
                if cancel.is_some_and(|c| c.is_cancelled()) {
                    return ignore::WalkState::Quit;
                }
                let Ok(entry) = entry else {
                    return ignore::WalkState::Continue;
                };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return ignore::WalkState::Continue;
                }
                if let Some((matcher, by_path)) = filter
                    && !single_file
                {
                    let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
                    let hit = if *by_path {
                        matcher.is_match(rel)
                    } else {
                        matcher.is_match(entry.file_name())
                    };
                    if !hit {
                        return ignore::WalkState::Continue;
                    }
                }
                let Some(data) = read_searchable(anchor, anchor_path, entry.path()) else {
                    return ignore::WalkState::Continue;
                };
                files_searched.fetch_add(1, Ordering::Relaxed);
                let sample = &data[..data.len().min(crate::tool::fs::BINARY_SAMPLE)];
                if sample.contains(&0) {
                    binary_skipped.fetch_add(1, Ordering::Relaxed);
                    return ignore::WalkState::Continue;
                }
                let (lines, count) = search_bytes(regex, &data, per_file_cap);
                if count > 0 {
                    total_lines.fetch_add(count, Ordering::Relaxed);
                    files_matched.fetch_add(1, Ordering::Relaxed);
                    let context = context_lines(&data, &lines, options.context);
                    let found = FileHits {
                        path: entry.into_path(),
                        lines,
                        context,
                    };
                    if let Ok(mut all) = hits.lock() {
                        all.push(found);
                    }
                }
                ignore::WalkState::Continue
            })
        });
    let mut files = hits.into_inner().unwrap_or_default();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut shown_lines = 0usize;
    let mut keep = 0usize;
    for file in &mut files {
        if shown_lines >= options.max_results {
            break;
        }
        file.lines.truncate(options.max_results - shown_lines);
        let (lines, reach) = (&file.lines, options.context);
        file.context
            .retain(|c| lines.iter().any(|m| m.line.abs_diff(c.line) <= reach));
        shown_lines += file.lines.len();
        keep += 1;
    }
    files.truncate(keep);
    Ok(GrepReport {
        files,
        shown_lines,
        total_lines: total_lines.into_inner(),
        files_matched: files_matched.into_inner(),
        files_searched: files_searched.into_inner(),
        binary_skipped: binary_skipped.into_inner(),
    })
}

/// The content of a file to search, `None` when unreadable, not a regular file (a link or
/// FIFO swapped in after the walk saw it is skipped, not followed or waited on) or over the
/// size cap. Opened beneath `anchor` by the one untrusted-file reader.
fn read_searchable(
    anchor: &crate::untrusted_fs::Dir,
    anchor_path: &Path,
    path: &Path,
) -> Option<Vec<u8>> {
    let rel = path.strip_prefix(anchor_path).ok()?;
    anchor.read(rel, GREP_MAX_FILE_BYTES).ok()?
}

/// The lines within `reach` of a match in `hits` that are not matches, in order.
fn context_lines(data: &[u8], hits: &[LineHit], reach: usize) -> Vec<LineHit> {
    if reach == 0 || hits.is_empty() {
        return Vec::new();
    }
    let last_wanted = hits.last().map_or(0, |h| h.line + reach);
    let mut wanted = hits
        .iter()
        .flat_map(|h| h.line.saturating_sub(reach).max(1)..=h.line + reach);
    let mut next = wanted.next();
    let mut out: Vec<LineHit> = Vec::new();
    let is_hit = |n: usize| hits.binary_search_by_key(&n, |h| h.line).is_ok();
    let text = data.strip_suffix(b"\n").unwrap_or(data);
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        if n > last_wanted {
            break;
        }
        while next.is_some_and(|w| w < n) {
            next = wanted.next();
        }
        if next == Some(n) && !is_hit(n) && out.last().is_none_or(|l| l.line < n) {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            out.push(LineHit {
                line: n,
                text: clip_line(&String::from_utf8_lossy(line), 300),
            });
        }
    }
    out
}

/// Matching lines of one file (at most `cap` kept) and how many lines matched in all.
///
/// Line-oriented like ripgrep: the earliest end of a match locates a candidate line (a forward
/// scan only, no search for where the match starts), and the regex is confirmed on that line
/// alone, so a match never spans lines.
fn search_bytes(regex: &regex::bytes::Regex, data: &[u8], cap: usize) -> (Vec<LineHit>, usize) {
    let mut hits = Vec::new();
    let mut count = 0usize;
    let mut line_no = 1usize;
    let mut counted_to = 0usize;
    let mut at = 0usize;
    while at <= data.len() {
        let Some(match_end) = regex.shortest_match_at(data, at) else {
            break;
        };
        // The line holding the last byte of the match (or the empty match itself).
        let pos = if match_end > at {
            match_end - 1
        } else {
            match_end
        };
        let start = data[..pos]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1)
            .max(at);
        if start == data.len() {
            // Past the final newline there is no line (ripgrep does not report one either).
            break;
        }
        let end = data[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(data.len(), |p| pos + p);
        let line = &data[start..end];
        if !regex.is_match(line) {
            at = end + 1;
            continue;
        }
        line_no += data[counted_to..start]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        counted_to = start;
        count += 1;
        if hits.len() < cap {
            let text = line.strip_suffix(b"\r").unwrap_or(line);
            hits.push(LineHit {
                line: line_no,
                text: clip_line(&String::from_utf8_lossy(text), 300),
            });
        }
        at = end + 1;
    }
    (hits, count)
}

#[derive(Deserialize)]
struct GrepArgs {
    pattern: String,
    #[serde(default = "default_dot")]
    path: String,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    literal: bool,
    #[serde(default)]
    hidden: bool,
    #[serde(default)]
    files_only: bool,
    #[serde(default)]
    max_results: Option<usize>,
    #[serde(default)]
    context: Option<usize>,
}

/// The most context lines grep shows on each side of a match.
pub const GREP_MAX_CONTEXT: usize = 10;

pub struct GrepTool;

impl Tool for GrepTool {
    fn name(&self) -> &'static str {
        "grep"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "Search file contents with a regular expression (Rust regex syntax, like \
                 ripgrep) under a directory or in one file. Returns `path:line:text` for each \
                 matching line, sorted by path. Respects .gitignore; skips hidden files unless \
                 `hidden`, binary files and files over {} MiB. Returns at most `max_results` \
                 lines (default {GREP_DEFAULT_RESULTS}, at most {GREP_MAX_RESULTS}) and says how \
                 many were left out. Use `glob` (e.g. '*.py') to restrict the files searched; \
                 `context` N adds N lines before and after each match, as `path-line-text`, \
                 with `--` between groups that are not adjacent.",
                GREP_MAX_FILE_BYTES >> 20
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression (or literal text with literal=true)."},
                    "path": {"type": "string", "description": "Directory or file to search, relative to the workspace root (default '.')."},
                    "glob": {"type": "string", "description": "Only search files matching this glob, e.g. '*.rs' or 'src/**/*.ts'."},
                    "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)."},
                    "literal": {"type": "boolean", "description": "Treat pattern as literal text, not a regex (default false)."},
                    "hidden": {"type": "boolean", "description": "Also search hidden files (default false)."},
                    "files_only": {"type": "boolean", "description": "Return only the paths of matching files (default false)."},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": GREP_MAX_RESULTS, "description": "Most lines (or files) to return."},
                    "context": {"type": "integer", "minimum": 0, "maximum": GREP_MAX_CONTEXT, "description": "Lines to show before and after each match (default 0)."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, _args: &serde_json::Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &serde_json::Value) -> String {
        format!(
            "grep {} in {}",
            args["pattern"].as_str().unwrap_or("?"),
            args["path"].as_str().unwrap_or(".")
        )
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        run_blocking(ctx, move |ctx| into_result(grep(&args, ctx)))
    }
}

fn grep(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let args: GrepArgs = parse_args("grep", args)?;
    let rules = tool_rules(&ctx.workspace);
    let target = resolve_visible(&ctx.workspace, &args.path, &rules)?;
    let skip = rules.hidden().clone();
    if !target.abs.exists() {
        return Err(ToolError::NotFound {
            path: target.rel,
            what: "no such file or directory",
        });
    }
    let max_results = args
        .max_results
        .unwrap_or(GREP_DEFAULT_RESULTS)
        .clamp(1, GREP_MAX_RESULTS);
    let options = GrepOptions {
        pattern: args.pattern.clone(),
        case_insensitive: args.case_insensitive,
        literal: args.literal,
        glob: args.glob,
        hidden: args.hidden,
        max_results: if args.files_only {
            GREP_MAX_RESULTS
        } else {
            max_results
        },
        context: if args.files_only {
            0
        } else {
            args.context.unwrap_or(0).min(GREP_MAX_CONTEXT)
        },
        cancel: Some(ctx.cancel.clone()),
    };
    let threads = search_threads();
    refuse_a_blocking_walk(&target.abs, &workspace_root(ctx))?;
    let report = crate::tool::confined::walk_confined(&ctx.workspace, || {
        grep_search_on(&target.abs, &options, threads, skip)
    })??;
    let root = workspace_root(ctx);
    if report.total_lines == 0 {
        let mut text = format!("no matches for '{}' in {}", args.pattern, target.rel);
        if report.binary_skipped > 0 {
            text.push_str(&format!(
                " ({} binary files skipped)",
                report.binary_skipped
            ));
        }
        return Ok(text);
    }
    let mut out = String::new();
    if args.files_only {
        let files: Vec<String> = report.files.iter().map(|f| shown(&root, &f.path)).collect();
        let total = report.files_matched;
        for file in files.iter().take(max_results) {
            out.push_str(file);
            out.push('\n');
        }
        let listed = files.len().min(max_results);
        if total > listed {
            out.push_str(&format!(
                "[{} more files not shown ({total} matched)]\n",
                total - listed
            ));
        }
        return Ok(out);
    }
    let mut previous_file = false;
    for file in &report.files {
        let path = shown(&root, &file.path);
        if options.context == 0 {
            for hit in &file.lines {
                out.push_str(&format!("{path}:{}:{}\n", hit.line, hit.text));
            }
            continue;
        }
        // ripgrep's layout: matches `path:N:`, context `path-N-`, `--` where lines skip.
        let mut shown_to: Option<usize> = None;
        let mut lines: Vec<(&LineHit, char)> = file.lines.iter().map(|h| (h, ':')).collect();
        lines.extend(file.context.iter().map(|h| (h, '-')));
        lines.sort_by_key(|(h, _)| h.line);
        for (hit, sep) in lines {
            let gap = shown_to.map_or(previous_file, |to| hit.line > to + 1);
            if gap {
                out.push_str("--\n");
            }
            out.push_str(&format!("{path}{sep}{}{sep}{}\n", hit.line, hit.text));
            shown_to = Some(hit.line);
        }
        previous_file = true;
    }
    let dropped = report.total_lines - report.shown_lines;
    if dropped > 0 {
        out.push_str(&format!(
            "[{dropped} more matching lines not shown ({} lines in {} files matched); narrow the \
             pattern, path or glob, or raise max_results]\n",
            report.total_lines, report.files_matched
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grep_options(pattern: &str) -> GrepOptions {
        GrepOptions {
            pattern: pattern.into(),
            case_insensitive: false,
            literal: true,
            glob: None,
            hidden: false,
            max_results: 100,
            context: 0,
            cancel: None,
        }
    }

    /// What a walk that a swapped folder led out of the workspace would reach, made
    /// deterministic: the walks start at `out/.`, a path through a link to a folder outside.
    /// Unconfined (the old code) the walkers list its names and grep reads its lines; on the
    /// confined thread the kernel refuses the folder, whatever the walker's own checks.
    #[test]
    fn a_confined_walk_that_a_link_leads_outside_reads_nothing_there() {
        if !crate::tool::confined::landlock_here() {
            eprintln!("no Landlock on this kernel: the confinement is not checked");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret-name.txt"), "SECRET-LINE\n").unwrap();
        std::fs::write(ws.join("inside.txt"), "SECRET-LINE inside\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.join("out")).unwrap();
        let through = ws.join("out/.");
        let names = || list_tree(&through, "out", 3, true, Hidden::nothing());
        let search = |root: &Path| {
            grep_search_on(root, &grep_options("SECRET-LINE"), 4, Hidden::nothing()).unwrap()
        };

        // The control: unconfined, both walks reach the outside folder.
        assert!(names().contains("secret-name.txt"), "{}", names());
        let report = search(&through);
        assert_eq!((report.files_searched, report.files_matched), (1, 1));

        let confined = |work: &(dyn Fn() -> String + Sync)| {
            crate::tool::confined::walk_confined(&ws, work).unwrap()
        };
        let listed = confined(&names);
        assert!(!listed.contains("secret-name"), "{listed}");
        let report = crate::tool::confined::walk_confined(&ws, || search(&through)).unwrap();
        assert_eq!(
            (report.files_searched, report.total_lines),
            (0, 0),
            "{report:?}"
        );
        // The workspace itself is searched as before (the link is not followed).
        let report = crate::tool::confined::walk_confined(&ws, || search(&ws)).unwrap();
        let found: Vec<_> = report.files.iter().map(|f| f.path.clone()).collect();
        assert_eq!(found, [ws.join("inside.txt")]);
    }

    #[test]
    fn search_bytes_reports_each_line_once_with_numbers() {
        let re = regex::bytes::RegexBuilder::new("o")
            .multi_line(true)
            .build()
            .unwrap();
        let (hits, count) = search_bytes(&re, b"foo\nbar\nboo\r\n", 10);
        assert_eq!(count, 2);
        assert_eq!(hits[0].line, 1);
        assert_eq!(hits[1].line, 3);
        assert_eq!(hits[1].text, "boo");
        let re = regex::bytes::RegexBuilder::new("^b")
            .multi_line(true)
            .build()
            .unwrap();
        let (hits, count) = search_bytes(&re, b"foo\nbar\nboo", 1);
        assert_eq!((hits.len(), count), (1, 2));
        assert_eq!(hits[0].line, 2);
        // A match may not span lines: `o\sb` only matches across the newline here.
        let re = regex::bytes::RegexBuilder::new(r"o\sb|^x")
            .multi_line(true)
            .build()
            .unwrap();
        let (hits, count) = search_bytes(&re, b"foo\nbar\nx", 10);
        assert_eq!(count, 1);
        assert_eq!(hits[0].line, 3);
        // Empty matches and anchors.
        let re = regex::bytes::RegexBuilder::new("^$")
            .multi_line(true)
            .build()
            .unwrap();
        let (hits, count) = search_bytes(&re, b"a\n\nb\n", 10);
        assert_eq!(count, 1, "{hits:?}");
        assert_eq!(hits[0].line, 2);
    }
}
