//! What went wrong in a tool call, as a kind: bad arguments, a refused path, an I/O or git
//! failure, a rule of the tool saying no, the sandbox or the terminal failing. The `Display`
//! of each variant is the text the model reads, so it says what to do next.

use std::time::Duration;

use crate::protocol::{SandboxMode, ToolStatus};
use crate::sandbox::SandboxError;
use crate::tool::ToolResult;
use crate::tool::path::PathError;
use crate::tool::shell::WorkdirError;

/// Why a tool call failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The model's arguments do not deserialize into the tool's argument type.
    #[error("invalid arguments for {tool}: {source}")]
    Arguments {
        tool: String,
        #[source]
        source: serde_json::Error,
    },
    /// The arguments came as a JSON string whose content is not JSON.
    #[error("invalid arguments for {tool}: not a JSON object: {source}")]
    ArgumentsNotJson {
        tool: String,
        #[source]
        source: serde_json::Error,
    },
    /// An argument has the right type but cannot be used as given (an empty `old_string`, a
    /// plan with two steps in progress, a commit without a message, a missing `session_id`).
    /// `reason` names the argument and what to send instead.
    #[error("{reason}")]
    InvalidArgument { reason: String },
    /// A regular expression from the model does not compile.
    #[error("invalid regex '{pattern}': {source}")]
    Regex {
        pattern: String,
        #[source]
        source: regex::Error,
    },
    /// A glob from the model does not compile.
    #[error("invalid glob pattern '{pattern}': {source}")]
    Glob {
        pattern: String,
        #[source]
        source: globset::Error,
    },
    /// A path was refused by the workspace rules (`tool::path`).
    #[error(transparent)]
    Path(#[from] PathError),
    /// A shell `workdir` was refused or cannot be resolved.
    #[error(transparent)]
    Workdir(#[from] WorkdirError),
    /// Reading, writing or inspecting `path` (as the model names it) failed.
    #[error("{}", io_message(*.op, .path, .source))]
    Io {
        op: IoOp,
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A walk or git would have to open a file that is not a regular file (a FIFO would hold
    /// baton until something writes to it).
    #[error(
        "{path} is not a regular file (a FIFO, socket, device or kernel file), and the walk or git would wait on it for good, so baton does not start; remove it (`rm {path}`) or look with a command"
    )]
    WalkBlocked { path: String },
    /// A file or directory the call needs does not exist; `what` says which and what to use.
    #[error("{path}: {what}")]
    NotFound { path: String, what: &'static str },
    /// A path that must name a file has no parent directory (e.g. `/`).
    #[error("{path}: has no parent directory")]
    NoParentDirectory { path: String },
    /// The file changed on disk since the model last read it.
    #[error("{path}: file changed since read; read it again with read_file before changing it")]
    Stale { path: String },
    /// The file exists and the model never read it, so it cannot know what it replaces.
    #[error(
        "{path}: this file exists and has not been read in this session; read it with read_file first"
    )]
    Unread { path: String },
    /// The file is binary; its bytes are not shown to the model.
    #[error(
        "{path} is a binary file ({bytes} bytes); its contents are not shown. Inspect it with a command (e.g. `file`, `xxd | head`) if you need to."
    )]
    Binary { path: String, bytes: u64 },
    /// The file is larger than `outline` parses.
    #[error("{path}: too large to outline ({bytes} bytes); use grep to find definitions")]
    TooLargeToOutline { path: String, bytes: u64 },
    /// `outline` has no grammar for this file type.
    #[error(
        "{path}: unsupported file type for outline (supported: .rs .py .js .jsx .ts .tsx .go .c .h .cc .cpp .hpp)"
    )]
    UnsupportedLanguage { path: String },
    /// A tree-sitter grammar could not be loaded.
    #[error("cannot load the {language} grammar: {source}")]
    Grammar {
        language: &'static str,
        #[source]
        source: tree_sitter::LanguageError,
    },
    /// The parser returned no tree (it was cancelled or has no language).
    #[error("the {language} parser gave no tree")]
    NoParseTree { language: &'static str },
    /// The text of a patch is not a valid patch envelope; `reason` names the line.
    #[error("{reason}")]
    MalformedPatch { reason: String },
    /// A well-formed patch does not fit the file; `reason` names the file and hunk and shows
    /// what the file holds there.
    #[error("{reason}")]
    PatchDoesNotApply { reason: String },
    /// A rule of the tool refused a well-formed call that none of the variants above
    /// describes: an `edit` whose `old_string` is missing or ambiguous, an `offset` past the
    /// end, a directory where a file is needed, a file that already exists, nothing to commit.
    /// `reason` is the whole text the model reads: what was refused and what to do instead.
    #[error("{reason}")]
    Rejected { reason: String },
    /// A multi-file change failed midway and every file was restored.
    #[error("{cause}; no file was changed")]
    RolledBack {
        #[source]
        cause: Box<ToolError>,
    },
    /// The workspace is not inside a git repository.
    #[error("{path}: not a git repository")]
    NotARepository { path: String },
    /// A repository named by the `git` tool's `repo` keeps its git data outside the workspace.
    #[error("{path}: the repository's git data ({gitdir}) is outside the workspace")]
    RepositoryOutsideWorkspace { path: String, gitdir: String },
    /// The repository's work tree (its folder, or where `core.worktree` points) lies outside
    /// the workspace.
    #[error(
        "{path}: the repository's work tree ({worktree}) is outside the workspace; the git tool works on repositories inside it (git in the shell runs sandboxed)"
    )]
    WorkTreeOutsideWorkspace { path: String, worktree: String },
    /// The repository has no working tree.
    #[error("{path}: the repository is bare (no working tree)")]
    BareRepository { path: String },
    /// A path inside the workspace lies outside the repository found for it.
    #[error("path '{path}' is outside the repository {repository}")]
    OutsideRepository { path: String, repository: String },
    /// A revision the model named does not resolve.
    #[error("unknown revision '{rev}': {}", .source.message())]
    UnknownRevision {
        rev: String,
        #[source]
        source: git2::Error,
    },
    /// A git operation failed.
    #[error("git {action}: {}", .source.message())]
    Git {
        action: &'static str,
        #[source]
        source: git2::Error,
    },
    /// The sandbox could not be prepared for a command.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The command's process could not be started under the sandbox.
    #[error(
        "starting `{program}` in the sandbox ({mode}): {source}; `baton sandbox --probe` shows what this system can enforce"
    )]
    Spawn {
        program: String,
        mode: SandboxMode,
        #[source]
        source: std::io::Error,
    },
    /// Setting up the command's terminal (PTY, descriptors, the waiter thread) failed;
    /// `step` says which part.
    #[error("{step}: {source}")]
    Terminal {
        step: String,
        #[source]
        source: std::io::Error,
    },
    /// Writing keys to a running command's terminal failed.
    #[error("writing to session {session}: {source}")]
    SessionWrite {
        session: u32,
        #[source]
        source: std::io::Error,
    },
    /// The command did not read its input: the terminal buffer stayed full.
    #[error(
        "session {session} is not reading its input (the terminal buffer is full after {} s)",
        .waited.as_secs()
    )]
    InputBlocked { session: u32, waited: Duration },
    /// No running shell session has this id.
    #[error(
        "no running session {id} (it finished or never existed); running: {}",
        list_or_none(.running)
    )]
    NoSession { id: u64, running: Vec<u32> },
    /// As many commands as allowed are running already.
    #[error(
        "{max} commands are already running (sessions {}); finish or kill one first (poll with kill=true, or write_stdin \\u0003)",
        list_or_none(.running)
    )]
    TooManySessions { max: usize, running: Vec<u32> },
    /// A lock shared by the tools was poisoned by a panic elsewhere.
    #[error("internal error: {what}")]
    Internal { what: &'static str },
}

impl ToolError {
    /// The status the tool result carries: a call that ran out of time is `TimedOut`, every
    /// other failure is `Error`.
    pub fn status(&self) -> ToolStatus {
        match self {
            ToolError::InputBlocked { .. } => ToolStatus::TimedOut,
            _ => ToolStatus::Error,
        }
    }

    /// A refusal by a rule of the tool, `reason` being the whole text the model reads.
    pub fn rejected(reason: impl Into<String>) -> Self {
        ToolError::Rejected {
            reason: reason.into(),
        }
    }

    /// An argument that cannot be used as given.
    pub fn invalid_argument(reason: impl Into<String>) -> Self {
        ToolError::InvalidArgument {
            reason: reason.into(),
        }
    }

    /// An I/O failure on `path` (as the model names it).
    pub fn io(op: IoOp, path: impl Into<String>, source: std::io::Error) -> Self {
        ToolError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

impl From<ToolError> for ToolResult {
    fn from(e: ToolError) -> Self {
        ToolResult {
            status: e.status(),
            ..ToolResult::error(e.to_string())
        }
    }
}

/// What was being done to a file when an I/O call failed; it picks the wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// `metadata` and the like: the message is the path and the OS error.
    Inspect,
    Open,
    Read,
    /// Reading failed and the path turned out to be a directory.
    ReadDirectory,
    Delete,
    CreateDir,
    CreateTemp,
    Write,
    SetPermissions,
    Replace,
}

fn io_message(op: IoOp, path: &str, e: &std::io::Error) -> String {
    match op {
        IoOp::Inspect => format!("{path}: {e}"),
        IoOp::Open => format!("{path}: cannot open: {e}"),
        IoOp::Read => format!("{path}: cannot read: {e}"),
        IoOp::ReadDirectory => format!("{path} is a directory, not a file ({e})"),
        IoOp::Delete => format!("{path}: cannot delete: {e}"),
        IoOp::CreateDir => format!("cannot create directory {path}: {e}"),
        IoOp::CreateTemp => format!("cannot create a temp file in {path}: {e}"),
        IoOp::Write => format!("cannot write {path}: {e}"),
        IoOp::SetPermissions => format!("cannot set permissions on {path}: {e}"),
        IoOp::Replace => format!("cannot replace {path}: {e}"),
    }
}

fn list_or_none(ids: &[u32]) -> String {
    if ids.is_empty() {
        return "none".to_string();
    }
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_name_the_path_and_the_operation() {
        let e = ToolError::io(
            IoOp::Read,
            "src/lib.rs",
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        assert!(
            e.to_string().starts_with("src/lib.rs: cannot read: "),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(e.status(), ToolStatus::Error);
    }

    #[test]
    fn a_blocked_write_is_a_timeout_and_says_how_long() {
        let e = ToolError::InputBlocked {
            session: 3,
            waited: Duration::from_secs(5),
        };
        assert_eq!(e.status(), ToolStatus::TimedOut);
        assert_eq!(
            e.to_string(),
            "session 3 is not reading its input (the terminal buffer is full after 5 s)"
        );
    }

    #[test]
    fn a_rollback_keeps_the_cause_as_source() {
        let cause = ToolError::io(
            IoOp::Delete,
            "a.txt",
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        let e = ToolError::RolledBack {
            cause: Box::new(cause),
        };
        assert!(e.to_string().ends_with("; no file was changed"), "{e}");
        assert!(e.to_string().starts_with("a.txt: cannot delete: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn session_lists_read_none_when_empty() {
        let e = ToolError::NoSession {
            id: 7,
            running: Vec::new(),
        };
        assert!(e.to_string().ends_with("running: none"), "{e}");
        let e = ToolError::TooManySessions {
            max: 2,
            running: vec![1, 2],
        };
        assert!(e.to_string().contains("(sessions 1, 2)"), "{e}");
    }
}
