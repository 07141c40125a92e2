//! The errors of `baton eval`: finding and loading task folders ([`TaskError`], [`LoadError`])
//! and preparing or writing a job ([`EvalError`]). Every variant names the file, folder or
//! option it is about; the messages are what `baton eval` prints after its prefix.

use std::path::{Path, PathBuf};

use super::isolation::IsolationError;
use super::trial::UnknownAgent;
use super::yaml_lite::YamlError;

/// Why a path given to `baton eval` holds no task, or a task folder is malformed. A task
/// that is well-formed but needs something baton cannot provide is skipped, not an error.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A path on the command line does not exist.
    #[error("{}: no such task or folder", path.display())]
    NotFound { path: PathBuf },
    /// A folder that is no task and holds none.
    #[error("{}: neither a task (task.toml / task.yaml) nor a folder of tasks", path.display())]
    NoTasks { path: PathBuf },
    /// A folder whose entries cannot be listed.
    #[error("{}: cannot list: {source}", path.display())]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The folder has neither task file.
    #[error("{}: no task.toml or task.yaml", dir.display())]
    NoTaskFile { dir: PathBuf },
    /// A file of the task that is missing or unreadable.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `task.toml` is not valid TOML.
    #[error("{}: invalid TOML: {source}", path.display())]
    Toml {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    /// `task.yaml` cannot be read as the flat YAML TB1 tasks use.
    #[error("{}: {source}", path.display())]
    Yaml {
        path: PathBuf,
        #[source]
        source: YamlError,
    },
    /// A key of the task file has the wrong type or value.
    #[error("{}: {key} must be {expected}, got {found}", path.display())]
    Field {
        path: PathBuf,
        key: String,
        expected: &'static str,
        found: String,
    },
    /// `instruction.md` holds only whitespace.
    #[error("{}: the instruction is empty", path.display())]
    EmptyInstruction { path: PathBuf },
    /// `task.yaml` has no (or an empty) `instruction`.
    #[error("{}: missing instruction", path.display())]
    MissingInstruction { path: PathBuf },
    /// A file every task of the format needs (`tests/test.sh`, `run-tests.sh`).
    #[error("{}: missing {file}", dir.display())]
    MissingFile { dir: PathBuf, file: &'static str },
    /// A step of a multi-step task without a test script of its own or the task's.
    #[error("{}: step '{step}' has no steps/{step}/tests/test.sh and the task no tests/test.sh", dir.display())]
    MissingStepTest { dir: PathBuf, step: String },
}

impl TaskError {
    pub(crate) fn read(path: &Path, source: std::io::Error) -> Self {
        TaskError::Read {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn field(
        path: &Path,
        key: impl Into<String>,
        expected: &'static str,
        found: impl std::fmt::Display,
    ) -> Self {
        TaskError::Field {
            path: path.to_path_buf(),
            key: key.into(),
            expected,
            found: found.to_string(),
        }
    }
}

/// A task folder that cannot be loaded: which folder, and why. The message is the cause's
/// (it already names the file inside the folder).
#[derive(Debug)]
pub struct LoadError {
    /// The task folder.
    pub dir: PathBuf,
    pub error: TaskError,
}

impl LoadError {
    /// The task's name as a report shows it: the folder's name.
    pub fn task_name(&self) -> String {
        super::task::dir_name(&self.dir)
    }
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

/// Why `baton eval` cannot prepare, run or record a job.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("--trials must be at least 1")]
    NoTrials,
    #[error("--timeout-multiplier must be positive, got {0}")]
    TimeoutMultiplier(f64),
    /// The baton binary for the `baton` agent (this executable) cannot be found.
    #[error("cannot find the baton executable: {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error(transparent)]
    Agent(#[from] UnknownAgent),
    /// A task path that holds no task.
    #[error(transparent)]
    Tasks(#[from] TaskError),
    /// A task folder that cannot be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// An `--include` / `--exclude` pattern that is not a glob.
    #[error("bad glob '{glob}': {source}")]
    Glob {
        glob: String,
        #[source]
        source: globset::Error,
    },
    #[error("bad glob set: {0}")]
    GlobSet(#[source] globset::Error),
    /// Two task folders with one name (trial folders would collide).
    #[error("two tasks are named '{name}' ({} and {}); trial folders are named after tasks", first.display(), second.display())]
    DuplicateName {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("no task left to run after --include/--exclude")]
    NothingToRun,
    /// The environment `--env` asked for cannot run trials here (bubblewrap cannot sandbox,
    /// the container runtime is missing or not working); the error names which.
    #[error("{0}")]
    Isolation(#[source] IsolationError),
    /// The job folder (or the folder above it) cannot be created.
    #[error("{}: cannot create: {source}", path.display())]
    CreateJobDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Every candidate job folder name is taken.
    #[error("{}: no free job folder name for '{name}'", out.display())]
    NoFreeJobName { out: PathBuf, name: String },
    /// `--resume-job` of a folder that holds no job.
    #[error("--resume-job: {0}")]
    Resume(String),
    #[error("cannot serialize the job result: {0}")]
    SerializeResult(#[source] serde_json::Error),
    #[error("{}: cannot write: {source}", path.display())]
    WriteResult {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
