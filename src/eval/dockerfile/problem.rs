//! Why a Dockerfile cannot become a local setup script, and on which line.

use super::installs::Installer;
use super::words::MAX_EXPANDED;

/// Why a Dockerfile cannot become a local setup script, and on which line.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerfileError {
    /// The first line of the instruction, when one instruction is to blame.
    pub line: Option<usize>,
    pub problem: Problem,
}

impl std::fmt::Display for DockerfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.problem),
            None => self.problem.fmt(f),
        }
    }
}

impl std::error::Error for DockerfileError {}

/// What in a Dockerfile baton cannot do without Docker, or cannot read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    #[error("no FROM line")]
    NoFrom,
    #[error("multi-stage builds need Docker")]
    MultiStage,
    /// A base image whose userland this machine does not stand in for.
    #[error("needs the Docker image '{image}', which baton cannot provide")]
    Image { image: String },
    #[error(
        "WORKDIR {path}: only /app, /root, /tmp, new top-level folders and paths below /usr, /etc, /opt and /var are writable"
    )]
    WorkdirOutsideApp { path: String },
    #[error("COPY --from needs a multi-stage Docker build")]
    CopyFromStage,
    #[error("{instruction} needs a source and a destination")]
    CopyArguments { instruction: String },
    #[error(
        "{instruction} into {dest}: only /app, /root, /tmp, new top-level folders and paths below /usr, /etc, /opt and /var (not those folders themselves, nor /var/run) are writable"
    )]
    CopyOutsideApp { instruction: String, dest: String },
    #[error("{instruction} of a URL ({url}) needs the network at build time")]
    CopyUrl { instruction: String, url: String },
    /// An ENTRYPOINT that does something before the container's command.
    #[error(
        "ENTRYPOINT {command} runs when the container starts; baton's trials have no container start"
    )]
    Entrypoint { command: String },
    #[error("RUN with an empty JSON array")]
    RunJsonForm,
    /// The trial has no network and the command fetches something.
    #[error("RUN needs the network at build time: {command}")]
    RunNeedsNetwork { command: String },
    #[error("needs {} not installed on this machine: {}", installer.packages(), packages.join(", "))]
    MissingPackages {
        installer: Installer,
        packages: Vec<String>,
    },
    /// `pip install -e .`, a wheel or a URL: what it installs cannot be checked here.
    #[error("pip installs '{spec}', which baton cannot check or install without Docker")]
    PipLocalInstall { spec: String },
    /// `pip install -r FILE` where FILE is not a file of the build context.
    #[error("pip -r {file}: not a file this Dockerfile copies from its build context")]
    Requirements { file: String },
    #[error("unsupported instruction {0}")]
    Instruction(String),
    /// An exec-form (`["a", "b"]`) argument list that is not a JSON array of strings.
    #[error("bad JSON array: {0}")]
    JsonArray(String),
    #[error("unbalanced quotes in '{0}'")]
    UnbalancedQuotes(String),
    /// `${VAR}` without its closing brace, or a bad name inside the braces.
    #[error("bad variable reference in '{0}'")]
    BadVariable(String),
    /// Variables that multiply each other (`ENV B=$A$A$A…` line after line).
    #[error("its variables expand to more than {} MiB", MAX_EXPANDED >> 20)]
    ExpandsTooFar,
    /// `${VAR:?message}` with VAR unset.
    #[error("{name}: {message}")]
    UnsetVariable { name: String, message: String },
}
