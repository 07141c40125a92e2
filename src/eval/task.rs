//! Task loading: Harbor (`task.toml` + `instruction.md`) and TB1 (`task.yaml`) task folders
//! become one [`Task`], or a [`Skipped`] entry that says why baton cannot run it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::dockerfile::{self, DockerPlan};
use super::error::{EvalError, LoadError, TaskError};
use super::fsutil::read_task_file;
use super::yaml_lite;

/// Harbor's defaults (`VerifierConfig.timeout_sec`, `EnvironmentConfig.build_timeout_sec`);
/// Harbor sets no agent timeout unless the task does.
const HARBOR_DEFAULT_VERIFIER_SEC: f64 = 600.0;
const DEFAULT_SETUP_SEC: f64 = 600.0;
/// TB1 harness defaults (`max_agent_timeout_sec`, `max_test_timeout_sec`).
const TB1_DEFAULT_AGENT_SEC: f64 = 360.0;
const TB1_DEFAULT_TEST_SEC: f64 = 60.0;

/// Which on-disk layout a task uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFormat {
    /// TB2 / Harbor: `task.toml`, `instruction.md`, `environment/`, `solution/solve.sh`, `tests/test.sh`.
    Harbor,
    /// TB1: `task.yaml`, `Dockerfile`, `solution.sh`, `run-tests.sh`, `tests/`.
    Tb1,
}

impl TaskFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskFormat::Harbor => "harbor",
            TaskFormat::Tb1 => "tb1",
        }
    }
}

/// How the trial's `/app` is prepared before the agent starts.
#[derive(Debug, Clone, Default)]
pub struct EnvironmentPlan {
    /// Host files copied into the working dir (`environment/` minus the setup script).
    pub files_from: Option<PathBuf>,
    /// Names in `files_from` that are not copied (the setup script, a Dockerfile).
    pub exclude: Vec<String>,
    /// Shell script run inside the sandbox before the agent, then removed.
    pub setup_script: Option<String>,
    /// Host folder visible read-only at `/environment` during setup (Dockerfile `COPY` sources).
    pub build_context: Option<PathBuf>,
    /// The working dir inside the sandbox (Dockerfile `WORKDIR`, default `/app`).
    pub workdir: String,
    /// Environment variables of the task's environment (`[environment.env]`, Dockerfile `ENV`).
    pub env: BTreeMap<String, String>,
    /// Top-level folders besides `/app` the environment writes to (`/workspace`, `/data`):
    /// each is a writable folder of the trial.
    pub extra_roots: Vec<String>,
    /// Paths in system folders the environment writes (`/opt/tool`): each is a folder or
    /// file of the trial mounted over the host's read-only system folder.
    pub system_mounts: Vec<dockerfile::SystemMount>,
    /// Under a container runtime (`--env podman|docker`): the image the trial runs in. The
    /// fields above that translate a Dockerfile are unused then, and an empty `workdir` is
    /// the image's own.
    pub image: Option<ImageSource>,
}

/// Where a task's image comes from under a container runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// Built from the task's Dockerfile with `context` as the build context.
    Dockerfile { file: PathBuf, context: PathBuf },
    /// A prebuilt image (`[environment].docker_image` without a Dockerfile).
    Prebuilt(String),
}

/// One runnable task.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    /// `[task].name` when it has an org prefix (`org/name`); used as the name when two
    /// tasks of a job share the short one.
    pub full_name: Option<String>,
    pub dir: PathBuf,
    pub format: TaskFormat,
    pub instruction: String,
    /// `None`: no limit (a Harbor task that sets none).
    pub agent_timeout: Option<Duration>,
    pub verifier_timeout: Duration,
    pub setup_timeout: Duration,
    pub allow_internet: bool,
    pub environment: EnvironmentPlan,
    /// The oracle's script, relative to `solution_dir` (`solve.sh`, or TB1's `solution.sh`).
    pub solution_dir: Option<PathBuf>,
    pub solution_script: String,
    /// Files copied to `/tests` after the agent stops.
    pub tests_dir: Option<PathBuf>,
    /// Extra single files copied to `/tests` (TB1's `run-tests.sh`).
    pub tests_extra_files: Vec<PathBuf>,
    /// Entry point inside `/tests`.
    pub test_entry: String,
    pub verifier_env: BTreeMap<String, String>,
    pub solution_env: BTreeMap<String, String>,
    /// Sandbox paths copied into the trial's `artifacts/` after the verifier (`artifacts`).
    pub artifacts: Vec<Artifact>,
    /// The task folder's checksum, computed by the first trial that needs it.
    pub checksum: std::sync::OnceLock<String>,
    /// Harbor's multi-step tasks (`[[steps]]`): each step's agent and verifier run in order in
    /// the one trial environment. Empty for a single-step task.
    pub steps: Vec<Step>,
    /// How a multi-step trial's reward comes from its steps' (`multi_step_reward_strategy`).
    pub step_reward: StepReward,
    /// `[agent].user` (or the Dockerfile's last `USER`): who the agent runs as; `None` is root.
    pub agent_user: Option<String>,
    /// `[verifier].user` (or the Dockerfile's last `USER`); `None` is root.
    pub verifier_user: Option<String>,
}

/// One step of a multi-step task (`[[steps]]` in task.toml, files under `steps/<name>/`).
#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    /// `steps/<name>/`.
    pub dir: PathBuf,
    pub instruction: String,
    /// The step's `[steps.agent].timeout_sec`, else the task's; `None`: no limit.
    pub agent_timeout: Option<Duration>,
    /// The step's `[steps.verifier].timeout_sec`, else the task's.
    pub verifier_timeout: Duration,
    /// The step's verifier env, applied over the task's `[verifier].env`.
    pub verifier_env: BTreeMap<String, String>,
    /// The test entry point inside `/tests`: the step's `tests/test.sh` when it has one (its
    /// files are copied over the task's `tests/`), else the task's.
    pub test_entry_from_step: bool,
    /// `min_reward`: the remaining steps are not run when a key is below its threshold (or
    /// missing). A plain number gates on `reward`.
    pub min_reward: BTreeMap<String, f64>,
    /// The step's `solution/solve.sh` (the oracle's script for this step) when present.
    pub solution_dir: Option<PathBuf>,
    pub agent_user: Option<String>,
    pub verifier_user: Option<String>,
    /// Sandbox paths collected after this step besides the task's `artifacts`.
    pub artifacts: Vec<Artifact>,
}

/// Harbor's `multi_step_reward_strategy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StepReward {
    /// Per-key means over the steps that have a verifier result (a missing key counts 0).
    #[default]
    Mean,
    /// The last step's rewards as they are.
    Final,
}

/// One entry of a Harbor task's `artifacts`.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    /// A sandbox path (`/app/out.json`).
    pub source: String,
    /// Relative path under the trial's `artifacts/`; the source's name when not given.
    pub destination: String,
}

/// A task folder baton cannot run here, with the reason.
#[derive(Debug, Clone)]
pub struct Skipped {
    pub name: String,
    pub dir: PathBuf,
    pub reason: String,
}

/// The result of loading one folder.
#[derive(Debug, Clone)]
pub enum Loaded {
    Ready(Box<Task>),
    Skipped(Skipped),
}

impl Loaded {
    pub fn name(&self) -> &str {
        match self {
            Loaded::Ready(t) => &t.name,
            Loaded::Skipped(s) => &s.name,
        }
    }
}

/// True when `dir` holds a task of either format.
pub fn is_task_dir(dir: &Path) -> bool {
    dir.join("task.toml").is_file() || dir.join("task.yaml").is_file()
}

/// Finds the task folders under the given paths: a task folder itself, or a folder whose
/// children (or grandchildren under `tasks/`) are task folders. Sorted by path, deduplicated.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, TaskError> {
    let mut found = Vec::new();
    for path in paths {
        if !path.exists() {
            return Err(TaskError::NotFound { path: path.clone() });
        }
        // Trials run in other folders: a relative task path would point elsewhere there.
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        let path = &absolute;
        if is_task_dir(path) {
            found.push(path.clone());
            continue;
        }
        let mut children = list_dirs(path)?;
        let nested = path.join("tasks");
        if nested.is_dir() && !is_task_dir(&nested) {
            children.extend(list_dirs(&nested)?);
        }
        let before = found.len();
        found.extend(children.into_iter().filter(|c| is_task_dir(c)));
        if found.len() == before {
            return Err(TaskError::NoTasks { path: path.clone() });
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

fn list_dirs(path: &Path) -> Result<Vec<PathBuf>, TaskError> {
    let entries = std::fs::read_dir(path).map_err(|source| TaskError::List {
        path: path.to_path_buf(),
        source,
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// Loads one task folder for the trial emulator ([`load_for`]), for an agent without
/// arguments (the API key the environment names stays hidden, see [`HostVars`]).
pub fn load(dir: &Path) -> Result<Loaded, LoadError> {
    load_for(dir, Environments::Emulated, &HostVars::for_agent(&[], &[]))
}

/// How a job makes its tasks' environments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environments {
    /// The trial emulator: a Dockerfile is translated into a setup script run under bwrap.
    Emulated,
    /// A container runtime builds the Dockerfile (or runs the prebuilt image) as it is.
    Images,
}

/// Loads one task folder. `Err` is a malformed task (bad TOML, missing instruction); a task
/// that is well-formed but needs something baton can't provide is `Ok(Loaded::Skipped)`.
pub fn load_for(dir: &Path, envs: Environments, host: &HostVars) -> Result<Loaded, LoadError> {
    let loaded = if dir.join("task.toml").is_file() {
        load_harbor(dir, envs, host)
    } else if dir.join("task.yaml").is_file() {
        load_tb1(dir, envs)
    } else {
        Err(TaskError::NoTaskFile {
            dir: dir.to_path_buf(),
        })
    };
    loaded.map_err(|error| LoadError {
        dir: dir.to_path_buf(),
        error,
    })
}

/// A task's name when its files name none: the folder's name.
pub(crate) fn dir_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

/// `Err` when `sub`, a folder the trial copies or mounts (`environment/`, `tests/`,
/// `solution/`, a step's), is a link out of the task folder `dir`: `environment -> /` would
/// put the host's files in the trial.
fn folder_inside(dir: &Path, sub: &Path, file: &Path, key: &str) -> Result<(), TaskError> {
    let inside = match (std::fs::canonicalize(sub), std::fs::canonicalize(dir)) {
        (Ok(sub), Ok(task)) => sub.starts_with(task),
        // Absent (or unreadable, which loading it reports): nothing is followed.
        _ => true,
    };
    if inside {
        return Ok(());
    }
    Err(TaskError::field(
        file,
        key.to_string(),
        "a folder inside the task",
        format!("{} (a link out of it)", sub.display()),
    ))
}

/// A file of the task folder `dir`, never through a link out of it ([`read_task_file`]).
fn read_text(dir: &Path, path: &Path) -> Result<String, TaskError> {
    read_task_file(dir, path).map_err(|e| TaskError::read(path, e))
}

fn secs(v: f64, file: &Path, key: &str) -> Result<Duration, TaskError> {
    if v.is_finite() && v > 0.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(TaskError::field(
            file,
            key,
            "a positive number of seconds",
            v,
        ))
    }
}

fn toml_number(
    table: Option<&toml::Value>,
    key: &str,
    file: &Path,
) -> Result<Option<f64>, TaskError> {
    match table.and_then(|t| t.get(key)) {
        None => Ok(None),
        Some(toml::Value::Integer(i)) => Ok(Some(*i as f64)),
        Some(toml::Value::Float(f)) => Ok(Some(*f)),
        Some(other) => Err(TaskError::field(file, key, "a number", other.type_str())),
    }
}

/// The host variables a task's `env` tables may template (`${VAR}`), for one job. A task is
/// untrusted input, and no list of names tells every credential apart (`GITHUB_PAT`,
/// `DATABASE_URL` with a password in it, `CI_JOB_JWT`): only the variables the user names
/// (`--task-env NAME`) are taken from the host, all others count as unset. The model's API key
/// stays on the host even when named: the variable holding it (`--api-key-env` among the
/// agent's arguments, else `BATON_API_KEY_ENV`, else `BATON_API_KEY`; whatever its name) and
/// any variable whose value is that key or holds it (a URL with the key in it).
#[derive(Debug, Clone, Default)]
pub struct HostVars {
    /// What the user named with `--task-env`.
    named: Vec<String>,
    /// The API-key variables, by name.
    key_names: Vec<String>,
    /// Their values (non-empty).
    key_values: Vec<String>,
}

/// A key shorter than this is only matched whole, never inside another value.
const MIN_KEY_INSIDE: usize = 8;

impl HostVars {
    /// The host variables of a job whose `baton` agent gets `agent_args` (empty for other
    /// agents: the key the environment names is hidden all the same), of which tasks may
    /// template those in `named`.
    pub fn for_agent(agent_args: &[String], named: &[String]) -> HostVars {
        let mut key_names = vec![super::trial::api_key_var(agent_args)];
        for name in std::env::var("BATON_API_KEY_ENV")
            .ok()
            .into_iter()
            .chain(["BATON_API_KEY".to_string()])
        {
            if !name.is_empty() && !key_names.contains(&name) {
                key_names.push(name);
            }
        }
        let key_values = key_names
            .iter()
            .filter_map(|n| std::env::var(n).ok())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        HostVars {
            named: named.to_vec(),
            key_names,
            key_values,
        }
    }

    /// The value of the host variable `name` for a task's `${name}`: `None` when it is unset,
    /// not named by the user, or holds the model's key (see [`HostVars`]).
    pub fn get(&self, name: &str) -> Option<String> {
        if !self.named.iter().any(|n| n == name) || self.key_names.iter().any(|k| k == name) {
            return None;
        }
        let value = std::env::var(name).ok()?;
        let holds_key = self.key_values.iter().any(|key| {
            value.trim() == key || (key.len() >= MIN_KEY_INSIDE && value.contains(key.as_str()))
        });
        (!holds_key).then_some(value)
    }
}

fn toml_env(
    table: Option<&toml::Value>,
    file: &Path,
    section: &str,
    host: &HostVars,
) -> Result<BTreeMap<String, String>, TaskError> {
    let mut env = BTreeMap::new();
    let Some(map) = table.and_then(|t| t.get("env")) else {
        return Ok(env);
    };
    let map = map.as_table().ok_or_else(|| {
        TaskError::field(file, format!("[{section}].env"), "a table", map.type_str())
    })?;
    for (k, v) in map {
        let value = match v {
            toml::Value::String(s) => {
                // Credentials stay on the host, as for the agent: a task cannot pull the model
                // key or a token into its trial through its own env table.
                let lookup = |k: &str| host.get(k);
                expand_host_vars(s, &lookup).map_err(|var| {
                    TaskError::field(
                        file,
                        format!("[{section}].env.{k}"),
                        "resolvable from the host environment",
                        format!(
                            "${{{var}}}, which is not set, not named with --task-env {var}, or holds the model's API key (which stays on the host); or use ${{{var}:-default}}"
                        ),
                    )
                })?
            }
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(TaskError::field(
                    file,
                    format!("[{section}].env.{k}"),
                    "a scalar",
                    other.type_str(),
                ));
            }
        };
        env.insert(k.clone(), value);
    }
    Ok(env)
}

/// Harbor's templating in env values, resolved from the host environment: `${VAR}` (which
/// must be set) and `${VAR:-default}` (the default when VAR is unset).
pub(crate) fn expand_host_vars(
    value: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    #[allow(
        clippy::expect_used,
        reason = "a literal pattern, exercised by the tests"
    )]
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}").expect("static regex")
    });
    let mut missing = None;
    let out = RE.replace_all(value, |c: &regex::Captures| match lookup(&c[1]) {
        Some(v) => v,
        None => match c.get(2) {
            Some(default) => default.as_str().to_string(),
            None => {
                missing.get_or_insert_with(|| c[1].to_string());
                String::new()
            }
        },
    });
    match missing {
        Some(name) => Err(name),
        None => Ok(out.into_owned()),
    }
}

/// The names a filter can match before the task is loaded: the folder's name and, for a
/// Harbor task, `[task].name` with and without its org prefix. Reads only `task.toml`.
pub fn peek_names(dir: &Path) -> Vec<String> {
    let mut names = vec![dir_name(dir)];
    if let Ok(text) = read_task_file(dir, &dir.join("task.toml"))
        && let Ok(doc) = text.parse::<toml::Table>()
        && let Some(full) = doc
            .get("task")
            .and_then(|t| t.get("name"))
            .and_then(|n| n.as_str())
    {
        let short = full.rsplit('/').next().unwrap_or(full);
        for n in [short, full] {
            if !n.is_empty() && !names.iter().any(|x| x == n) {
                names.push(n.to_string());
            }
        }
    }
    names
}

/// `artifacts = ["/app/out", { source = "/app/x", destination = "x" }]`.
fn toml_artifacts(doc: &toml::Value, file: &Path) -> Result<Vec<Artifact>, TaskError> {
    let Some(list) = doc.get("artifacts") else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| TaskError::field(file, "artifacts", "an array", list.type_str()))?;
    let mut out = Vec::new();
    for item in list {
        let (source, destination) = match item {
            toml::Value::String(s) => (s.clone(), None),
            toml::Value::Table(t) => (
                t.get("source")
                    .and_then(|v| v.as_str())
                    .ok_or_else(|| {
                        TaskError::field(file, "artifacts.source", "a string", "nothing")
                    })?
                    .to_string(),
                t.get("destination")
                    .and_then(|v| v.as_str())
                    .filter(|d| !d.is_empty())
                    .map(str::to_string),
            ),
            other => {
                return Err(TaskError::field(
                    file,
                    "artifacts[]",
                    "a path or a table",
                    other.type_str(),
                ));
            }
        };
        // Neither may leave the trial's artifacts folder (nor name its manifest).
        let escapes = |p: &str| p.split('/').any(|c| c == "..");
        let destination = destination.unwrap_or_else(|| {
            source
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string()
        });
        if escapes(&source)
            || escapes(&destination)
            || destination.starts_with('/')
            || destination.is_empty()
        {
            return Err(TaskError::field(
                file,
                "artifacts[]",
                "a path without '..' (and a relative destination)",
                format!("'{source}' -> '{destination}'"),
            ));
        }
        out.push(Artifact {
            source,
            destination,
        });
    }
    Ok(out)
}

/// `[agent].user` / `[verifier].user` (a name or a uid) as written; `None` when unset.
fn toml_user(table: Option<&toml::Value>) -> Option<String> {
    match table.and_then(|t| t.get("user")) {
        Some(toml::Value::String(u)) if !u.is_empty() => Some(u.clone()),
        Some(toml::Value::Integer(i)) => Some(i.to_string()),
        _ => None,
    }
}

fn key_name(step: &str) -> String {
    format!("steps/{step}")
}

/// A step name Harbor accepts: one portable folder name.
fn valid_step_name(name: &str) -> bool {
    !name.trim().is_empty()
        && name != "."
        && name != ".."
        && !name.ends_with(['.', ' '])
        && !name.chars().any(|c| {
            matches!(c, '<' | '>' | ':' | '"' | '/' | '\\' | '|' | '?' | '*') || c.is_control()
        })
        && name.len() <= 255
}

/// `[[steps]]`: each with `name`, optional `[steps.agent]` (`timeout_sec`, `user`),
/// `[steps.verifier]` (`timeout_sec`, `env`, `user`), `min_reward` and `artifacts`; the files
/// under `steps/<name>/` (`instruction.md`, optional `tests/`, `solution/`, `workdir/`).
fn toml_steps(
    dir: &Path,
    doc: &toml::Value,
    file: &Path,
    agent_timeout: Option<f64>,
    verifier_timeout: f64,
    host: &HostVars,
) -> Result<Vec<Step>, TaskError> {
    let Some(list) = doc.get("steps") else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| TaskError::field(file, "steps", "an array of tables", list.type_str()))?;
    let mut steps: Vec<Step> = Vec::new();
    for item in list {
        let name = item
            .get("name")
            .and_then(|n| n.as_str())
            .filter(|n| valid_step_name(n))
            .ok_or_else(|| {
                TaskError::field(
                    file,
                    "steps[].name",
                    "a folder name under steps/",
                    item.get("name").map_or("nothing".into(), |n| n.to_string()),
                )
            })?
            .to_string();
        if steps
            .iter()
            .any(|s| s.name.to_lowercase() == name.to_lowercase())
        {
            return Err(TaskError::field(file, "steps[].name", "unique", name));
        }
        let step_dir = dir.join("steps").join(&name);
        // A step's files are the task's: a link out of the task folder is not followed.
        let inside = match (std::fs::canonicalize(&step_dir), std::fs::canonicalize(dir)) {
            (Ok(step), Ok(task)) => step.starts_with(task),
            _ => true,
        };
        if !inside {
            return Err(TaskError::field(
                file,
                key_name(&name),
                "a folder inside the task",
                format!("{} (a link out of it)", step_dir.display()),
            ));
        }
        for sub in ["tests", "solution", "workdir"] {
            folder_inside(dir, &step_dir.join(sub), file, &key_name(&name))?;
        }
        let instruction_path = step_dir.join("instruction.md");
        let instruction = read_text(dir, &instruction_path)?;
        if instruction.trim().is_empty() {
            return Err(TaskError::EmptyInstruction {
                path: instruction_path,
            });
        }
        let agent = item.get("agent");
        let verifier = item.get("verifier");
        let key = |k: &str| format!("steps.{name}.{k}");
        let agent_sec = toml_number(agent, "timeout_sec", file)?.or(agent_timeout);
        let verifier_sec = toml_number(verifier, "timeout_sec", file)?.unwrap_or(verifier_timeout);
        let min_reward = match item.get("min_reward") {
            None => BTreeMap::new(),
            Some(toml::Value::Integer(i)) => BTreeMap::from([("reward".to_string(), *i as f64)]),
            Some(toml::Value::Float(f)) => BTreeMap::from([("reward".to_string(), *f)]),
            Some(toml::Value::Table(t)) => t
                .iter()
                .map(|(k, v)| match v {
                    toml::Value::Integer(i) => Ok((k.clone(), *i as f64)),
                    toml::Value::Float(f) => Ok((k.clone(), *f)),
                    other => Err(TaskError::field(
                        file,
                        key("min_reward"),
                        "a number or a table of numbers",
                        other.type_str(),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(TaskError::field(
                    file,
                    key("min_reward"),
                    "a number or a table of numbers",
                    other.type_str(),
                ));
            }
        };
        let solution = step_dir.join("solution");
        steps.push(Step {
            agent_timeout: agent_sec
                .map(|t| secs(t, file, &key("agent.timeout_sec")))
                .transpose()?,
            verifier_timeout: secs(verifier_sec, file, &key("verifier.timeout_sec"))?,
            verifier_env: toml_env(verifier, file, &key("verifier"), host)?,
            test_entry_from_step: step_dir.join("tests/test.sh").is_file(),
            min_reward,
            solution_dir: solution.join("solve.sh").is_file().then_some(solution),
            agent_user: toml_user(agent),
            verifier_user: toml_user(verifier),
            artifacts: toml_artifacts(item, file)?,
            instruction,
            dir: step_dir,
            name,
        });
    }
    if steps.is_empty() {
        return Err(TaskError::field(file, "steps", "at least one step", "none"));
    }
    Ok(steps)
}

fn load_harbor(dir: &Path, envs: Environments, host: &HostVars) -> Result<Loaded, TaskError> {
    let toml_path = dir.join("task.toml");
    let doc: toml::Value = read_text(dir, &toml_path)?
        .parse::<toml::Table>()
        .map(toml::Value::Table)
        .map_err(|e| TaskError::Toml {
            path: toml_path.clone(),
            source: Box::new(e),
        })?;
    let declared = doc
        .get("task")
        .and_then(|t| t.get("name"))
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty());
    let name = declared
        .map(|n| n.rsplit('/').next().unwrap_or(n).to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| dir_name(dir));
    let full_name = declared.filter(|n| n.contains('/')).map(str::to_string);
    let skip = |reason: String| {
        Ok(Loaded::Skipped(Skipped {
            name: name.clone(),
            dir: dir.to_path_buf(),
            reason,
        }))
    };
    let agent = doc.get("agent");
    let verifier = doc.get("verifier");
    let agent_timeout = toml_number(agent, "timeout_sec", &toml_path)?;
    let verifier_timeout =
        toml_number(verifier, "timeout_sec", &toml_path)?.unwrap_or(HARBOR_DEFAULT_VERIFIER_SEC);
    // Multi-step tasks (`[[steps]]`, `steps/<name>/instruction.md`): as in Harbor, the task's
    // own instruction.md is not used then.
    let steps = toml_steps(dir, &doc, &toml_path, agent_timeout, verifier_timeout, host)?;
    let instruction = if let Some(first) = steps.first() {
        first.instruction.clone()
    } else {
        let instruction_path = dir.join("instruction.md");
        let instruction = read_text(dir, &instruction_path)?;
        if instruction.trim().is_empty() {
            return Err(TaskError::EmptyInstruction {
                path: instruction_path,
            });
        }
        instruction
    };
    let step_reward = match doc.get("multi_step_reward_strategy") {
        None => StepReward::Mean,
        Some(toml::Value::String(s)) if s == "mean" => StepReward::Mean,
        Some(toml::Value::String(s)) if s == "final" => StepReward::Final,
        Some(other) => {
            return Err(TaskError::field(
                &toml_path,
                "multi_step_reward_strategy",
                "\"mean\" or \"final\"",
                other.to_string(),
            ));
        }
    };
    let environment = doc.get("environment");
    let solution = doc.get("solution");
    let setup_timeout =
        toml_number(environment, "build_timeout_sec", &toml_path)?.unwrap_or(DEFAULT_SETUP_SEC);
    let mut allow_internet = match environment.and_then(|e| e.get("allow_internet")) {
        None => true,
        Some(toml::Value::Boolean(b)) => *b,
        Some(other) => {
            return Err(TaskError::field(
                &toml_path,
                "environment.allow_internet",
                "a boolean",
                other.type_str(),
            ));
        }
    };
    for (section, table) in [
        ("environment", environment),
        ("agent", agent),
        ("verifier", verifier),
    ] {
        match table.and_then(|e| e.get("network_mode")) {
            None => {}
            // A phase's `public` does not widen what the environment allows.
            Some(toml::Value::String(m)) if m == "public" && section == "environment" => {
                allow_internet = true;
            }
            Some(toml::Value::String(m)) if m == "public" => {}
            Some(toml::Value::String(m)) if m == "no-network" => allow_internet = false,
            Some(toml::Value::String(m)) if m == "allowlist" => {
                return skip(format!(
                    "[{section}].network_mode = \"allowlist\": baton gives a trial the whole network or none"
                ));
            }
            Some(other) => {
                return Err(TaskError::field(
                    &toml_path,
                    format!("{section}.network_mode"),
                    "\"public\", \"no-network\" or \"allowlist\"",
                    other.to_string(),
                ));
            }
        }
    }
    let env_vars = toml_env(environment, &toml_path, "environment", host)?;
    let artifacts = toml_artifacts(&doc, &toml_path)?;
    let image = environment
        .and_then(|e| e.get("docker_image"))
        .and_then(|v| v.as_str())
        .filter(|i| !i.is_empty())
        .map(str::to_string);
    let gpus = toml_number(environment, "gpus", &toml_path)?.unwrap_or(0.0);
    if gpus > 0.0 {
        return skip(format!("needs {gpus} GPU(s) in its environment"));
    }
    let mut agent_user = toml_user(agent);
    let mut verifier_user = toml_user(verifier);

    let env_dir = dir.join("environment");
    let mut plan = EnvironmentPlan {
        workdir: "/app".into(),
        env: env_vars,
        ..Default::default()
    };
    if env_dir.join("docker-compose.yaml").is_file() || env_dir.join("docker-compose.yml").is_file()
    {
        return skip("its environment is a docker-compose file (several containers)".into());
    }
    if envs == Environments::Images {
        let dockerfile = env_dir.join("Dockerfile");
        plan.image = Some(if dockerfile.is_file() {
            ImageSource::Dockerfile {
                file: dockerfile,
                context: env_dir.clone(),
            }
        } else if let Some(image) = image {
            ImageSource::Prebuilt(image)
        } else {
            return skip(
                "its environment has no Dockerfile or docker_image for a container runtime to run; use --env bwrap".into(),
            );
        });
        plan.workdir = String::new();
    } else if env_dir.is_dir() {
        let setup = env_dir.join("setup.sh");
        let dockerfile = env_dir.join("Dockerfile");
        // A Dockerfile describes the environment (a pinned `docker_image` is built from it);
        // `setup.sh` without a Dockerfile is the local convention of tools/tbench.
        if dockerfile.is_file() {
            match dockerfile::translate(&read_text(dir, &dockerfile)?, allow_internet, &env_dir) {
                DockerPlan::Unsupported(reason) => {
                    let image = image
                        .map(|i| format!(" (prebuilt image '{i}')"))
                        .unwrap_or_default();
                    return skip(format!("{}: {reason}{image}", dockerfile.display()));
                }
                DockerPlan::Local(local) => {
                    plan.build_context = Some(env_dir.clone());
                    plan.setup_script = Some(local.script);
                    plan.workdir = local.workdir;
                    // `[environment.env]` is applied over the image's ENV, as Harbor does.
                    let task_env = std::mem::take(&mut plan.env);
                    plan.env = local.env;
                    plan.env.extend(task_env);
                    plan.extra_roots = local.extra_roots;
                    plan.system_mounts = local.system_mounts;
                    // Harbor: an unset user is the image's default USER.
                    agent_user = agent_user.or_else(|| local.user.clone());
                    verifier_user = verifier_user.or(local.user);
                }
            }
        } else if let Some(image) = image {
            return skip(format!(
                "needs the prebuilt Docker image '{image}', which baton cannot provide"
            ));
        } else if setup.is_file() {
            plan.files_from = Some(env_dir.clone());
            plan.exclude = vec!["setup.sh".into()];
            plan.setup_script = Some(read_text(dir, &setup)?);
        } else {
            plan.files_from = Some(env_dir.clone());
        }
    } else if let Some(image) = image {
        return skip(format!(
            "needs the prebuilt Docker image '{image}', which baton cannot provide"
        ));
    }
    if let Some(workdir) = environment
        .and_then(|e| e.get("workdir"))
        .and_then(|w| w.as_str())
        .filter(|w| w.starts_with('/'))
    {
        plan.workdir = workdir.trim_end_matches('/').to_string();
    }

    let solution_dir = dir.join("solution");
    let tests_dir = dir.join("tests");
    for sub in [&env_dir, &solution_dir, &tests_dir] {
        folder_inside(dir, sub, &toml_path, "task folders")?;
    }
    let task_test = tests_dir.join("test.sh").is_file();
    if steps.is_empty() && !task_test {
        return Err(TaskError::MissingFile {
            dir: dir.to_path_buf(),
            file: "tests/test.sh",
        });
    }
    if let Some(step) = steps.iter().find(|s| !s.test_entry_from_step && !task_test) {
        return Err(TaskError::MissingStepTest {
            dir: dir.to_path_buf(),
            step: step.name.clone(),
        });
    }
    Ok(Loaded::Ready(Box::new(Task {
        name,
        full_name,
        dir: dir.to_path_buf(),
        format: TaskFormat::Harbor,
        instruction,
        agent_timeout: agent_timeout
            .map(|t| secs(t, &toml_path, "agent.timeout_sec"))
            .transpose()?,
        verifier_timeout: secs(verifier_timeout, &toml_path, "verifier.timeout_sec")?,
        setup_timeout: secs(setup_timeout, &toml_path, "environment.build_timeout_sec")?,
        allow_internet,
        environment: plan,
        solution_dir: solution_dir
            .join("solve.sh")
            .is_file()
            .then_some(solution_dir),
        solution_script: "solve.sh".into(),
        // Optional, as in Harbor: a multi-step task may keep every test in its steps.
        tests_dir: tests_dir.is_dir().then_some(tests_dir),
        tests_extra_files: Vec::new(),
        test_entry: "test.sh".into(),
        verifier_env: toml_env(verifier, &toml_path, "verifier", host)?,
        solution_env: toml_env(solution, &toml_path, "solution", host)?,
        artifacts,
        checksum: std::sync::OnceLock::new(),
        steps,
        step_reward,
        agent_user,
        verifier_user,
    })))
}

fn load_tb1(dir: &Path, envs: Environments) -> Result<Loaded, TaskError> {
    let yaml_path = dir.join("task.yaml");
    let doc = yaml_lite::parse(&read_text(dir, &yaml_path)?).map_err(|source| TaskError::Yaml {
        path: yaml_path.clone(),
        source,
    })?;
    let name = dir_name(dir);
    let instruction = doc
        .get("instruction")
        .cloned()
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| TaskError::MissingInstruction {
            path: yaml_path.clone(),
        })?;
    let number = |key: &str, default: f64| -> Result<f64, TaskError> {
        match doc.get(key) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<f64>()
                .map_err(|_| TaskError::field(&yaml_path, key, "a number", format!("'{v}'"))),
        }
    };
    let agent_timeout = number("max_agent_timeout_sec", TB1_DEFAULT_AGENT_SEC)?;
    let test_timeout = number("max_test_timeout_sec", TB1_DEFAULT_TEST_SEC)?;
    let skip = |reason: String| {
        Ok(Loaded::Skipped(Skipped {
            name: name.clone(),
            dir: dir.to_path_buf(),
            reason,
        }))
    };
    if dir.join("docker-compose.yaml").is_file() || dir.join("docker-compose.yml").is_file() {
        let compose = dir.join("docker-compose.yaml");
        let compose = if compose.is_file() {
            compose
        } else {
            dir.join("docker-compose.yml")
        };
        let text = read_text(dir, &compose)?;
        if count_compose_services(&text) > 1 {
            return skip("its docker-compose file defines several containers".into());
        }
    }
    let mut plan = EnvironmentPlan {
        workdir: "/app".into(),
        ..Default::default()
    };
    folder_inside(dir, &dir.join("tests"), &yaml_path, "tests")?;
    let dockerfile = dir.join("Dockerfile");
    let mut image_user = None;
    if envs == Environments::Images {
        if !dockerfile.is_file() {
            return skip(
                "it has no Dockerfile for a container runtime to build; use --env bwrap".into(),
            );
        }
        plan.image = Some(ImageSource::Dockerfile {
            file: dockerfile,
            context: dir.to_path_buf(),
        });
        plan.workdir = String::new();
    } else if dockerfile.is_file() {
        // TB1 tasks assume network during the image build; the agent phase is what gets isolated.
        match dockerfile::translate(&read_text(dir, &dockerfile)?, true, dir) {
            DockerPlan::Unsupported(reason) => {
                return skip(format!("{}: {reason}", dockerfile.display()));
            }
            DockerPlan::Local(local) => {
                plan.build_context = Some(dir.to_path_buf());
                plan.setup_script = Some(local.script);
                plan.workdir = local.workdir;
                plan.env = local.env;
                plan.extra_roots = local.extra_roots;
                plan.system_mounts = local.system_mounts;
                image_user = local.user;
            }
        }
    }
    let parser = doc.get("parser_name").map(|s| s.trim().to_string());
    if let Some(p) = parser.as_deref()
        && p != "pytest"
    {
        return skip(format!(
            "uses the '{p}' test parser; baton reads pytest output only"
        ));
    }
    if dir.join("solution.yaml").is_file() && !dir.join("solution.sh").is_file() {
        // Keystroke solutions drive a tmux pane; still runnable for every agent but the oracle.
        tracing::debug!(
            "{}: solution.yaml only; the oracle will not pass",
            dir.display()
        );
    }
    let run_tests = dir.join("run-tests.sh");
    if !run_tests.is_file() {
        return Err(TaskError::MissingFile {
            dir: dir.to_path_buf(),
            file: "run-tests.sh",
        });
    }
    let mut verifier_env = BTreeMap::new();
    verifier_env.insert("TEST_DIR".to_string(), "/tests".to_string());
    Ok(Loaded::Ready(Box::new(Task {
        name,
        full_name: None,
        dir: dir.to_path_buf(),
        format: TaskFormat::Tb1,
        instruction,
        agent_timeout: Some(secs(agent_timeout, &yaml_path, "max_agent_timeout_sec")?),
        verifier_timeout: secs(test_timeout, &yaml_path, "max_test_timeout_sec")?,
        setup_timeout: Duration::from_secs_f64(DEFAULT_SETUP_SEC),
        allow_internet: true,
        environment: plan,
        solution_dir: dir.join("solution.sh").is_file().then(|| dir.to_path_buf()),
        solution_script: "solution.sh".into(),
        tests_dir: dir.join("tests").is_dir().then(|| dir.join("tests")),
        tests_extra_files: vec![run_tests],
        test_entry: "run-tests.sh".into(),
        verifier_env,
        solution_env: BTreeMap::new(),
        artifacts: Vec::new(),
        checksum: std::sync::OnceLock::new(),
        steps: Vec::new(),
        step_reward: StepReward::Mean,
        agent_user: image_user.clone(),
        verifier_user: image_user,
    })))
}

/// Number of entries under the top-level `services:` key of a compose file.
fn count_compose_services(text: &str) -> usize {
    let mut in_services = false;
    let mut count = 0;
    for line in text.lines() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        if indent == 0 {
            in_services = line.trim_end() == "services:";
            continue;
        }
        if in_services && indent == 2 && line.trim_end().ends_with(':') {
            count += 1;
        }
    }
    count
}

/// The tasks of a job: runnable, skipped (with why) and unloadable (with the error).
#[derive(Debug, Default)]
pub struct TaskSet {
    pub tasks: Vec<Task>,
    pub skipped: Vec<Skipped>,
    pub failed: Vec<LoadError>,
}

/// Finds the task folders under `paths`, keeps those whose names pass `include`/`exclude`
/// (matched before loading, against [`peek_names`]), and loads them. A folder that cannot
/// load is an entry of `failed`; it never stops the others. Tasks whose names differ only
/// in an org prefix (`a/foo`, `b/foo`) keep their full names.
pub fn load_set(
    paths: &[PathBuf],
    include: &[String],
    exclude: &[String],
    envs: Environments,
    host: &HostVars,
) -> Result<TaskSet, EvalError> {
    let dirs = discover(paths)?;
    let inc = globs(include)?;
    let exc = globs(exclude)?;
    let mut set = TaskSet::default();
    for dir in dirs {
        let names = peek_names(&dir);
        let included = inc
            .as_ref()
            .is_none_or(|g| names.iter().any(|n| g.is_match(n)));
        let excluded = exc
            .as_ref()
            .is_some_and(|g| names.iter().any(|n| g.is_match(n)));
        if !included || excluded {
            continue;
        }
        match load_for(&dir, envs, host) {
            Ok(Loaded::Ready(t)) => set.tasks.push(*t),
            Ok(Loaded::Skipped(s)) => set.skipped.push(s),
            Err(e) => set.failed.push(e),
        }
    }
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for t in &set.tasks {
        *count.entry(t.name.clone()).or_default() += 1;
    }
    for t in &mut set.tasks {
        if count.get(&t.name).is_some_and(|&n| n > 1)
            && let Some(full) = &t.full_name
        {
            t.name = full.clone();
        }
    }
    // Whatever still shares a name (two folders declaring one `org/name`) runs once.
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut tasks = Vec::with_capacity(set.tasks.len());
    for t in std::mem::take(&mut set.tasks) {
        if let Some(first) = seen.get(&t.name) {
            set.skipped.push(Skipped {
                name: t.name.clone(),
                dir: t.dir.clone(),
                reason: format!(
                    "another task of this job has the name '{}' ({})",
                    t.name,
                    first.display()
                ),
            });
            continue;
        }
        seen.insert(t.name.clone(), t.dir.clone());
        tasks.push(t);
    }
    set.tasks = tasks;
    if set.tasks.is_empty() && set.skipped.is_empty() && set.failed.is_empty() {
        return Err(EvalError::NothingToRun);
    }
    Ok(set)
}

fn globs(patterns: &[String]) -> Result<Option<globset::GlobSet>, EvalError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = globset::GlobSetBuilder::new();
    for g in patterns {
        b.add(globset::Glob::new(g).map_err(|source| EvalError::Glob {
            glob: g.clone(),
            source,
        })?);
    }
    b.build().map(Some).map_err(EvalError::GlobSet)
}

/// Keeps the tasks whose name matches any `include` glob (all when empty) and no `exclude` glob.
pub fn filter_names(
    names: &[String],
    include: &[String],
    exclude: &[String],
) -> Result<Vec<bool>, EvalError> {
    let build = |globs: &[String]| -> Result<Option<globset::GlobSet>, EvalError> {
        if globs.is_empty() {
            return Ok(None);
        }
        let mut b = globset::GlobSetBuilder::new();
        for g in globs {
            b.add(globset::Glob::new(g).map_err(|source| EvalError::Glob {
                glob: g.clone(),
                source,
            })?);
        }
        b.build().map(Some).map_err(EvalError::GlobSet)
    };
    let inc = build(include)?;
    let exc = build(exclude)?;
    Ok(names
        .iter()
        .map(|n| {
            inc.as_ref().is_none_or(|s| s.is_match(n))
                && !exc.as_ref().is_some_and(|s| s.is_match(n))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A malformed task is an error that names its folder (a report can show it as a row) and
    /// keeps the cause typed.
    #[test]
    fn a_task_that_cannot_load_names_its_folder_and_cause() {
        let root = tempfile::tempdir().unwrap();
        let bad_toml = root.path().join("bad-toml");
        std::fs::create_dir(&bad_toml).unwrap();
        std::fs::write(bad_toml.join("task.toml"), "[agent\ntimeout_sec = 1\n").unwrap();
        let err = load(&bad_toml).unwrap_err();
        assert_eq!(err.dir, bad_toml);
        assert_eq!(err.task_name(), "bad-toml");
        assert!(matches!(err.error, TaskError::Toml { .. }), "{err:?}");
        assert!(
            err.to_string().starts_with(&format!(
                "{}: invalid TOML: ",
                bad_toml.join("task.toml").display()
            )),
            "{err}"
        );

        let no_instruction = root.path().join("no-instruction");
        std::fs::create_dir(&no_instruction).unwrap();
        std::fs::write(
            no_instruction.join("task.toml"),
            "[agent]\ntimeout_sec = 5\n",
        )
        .unwrap();
        let err = load(&no_instruction).unwrap_err();
        match &err.error {
            TaskError::Read { path, source } => {
                assert_eq!(path, &no_instruction.join("instruction.md"));
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("expected a read error, got {other:?}"),
        }
        assert!(std::error::Error::source(&err).is_some());

        std::fs::write(no_instruction.join("instruction.md"), "do it").unwrap();
        std::fs::write(
            no_instruction.join("task.toml"),
            "[agent]\ntimeout_sec = \"soon\"\n",
        )
        .unwrap();
        let err = load(&no_instruction).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: timeout_sec must be a number, got string",
                no_instruction.join("task.toml").display()
            )
        );
    }

    #[test]
    fn paths_without_tasks_are_typed() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("nope");
        assert!(matches!(
            discover(std::slice::from_ref(&missing)),
            Err(TaskError::NotFound { path }) if path == missing
        ));
        assert!(matches!(
            discover(&[root.path().to_path_buf()]),
            Err(TaskError::NoTasks { .. })
        ));
        assert!(matches!(
            filter_names(&["a".into()], &["[".into()], &[]),
            Err(EvalError::Glob { glob, .. }) if glob == "["
        ));
    }
}
