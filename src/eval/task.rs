//! Task loading: Harbor (`task.toml` + `instruction.md`) and TB1 (`task.yaml`) task folders
//! become one [`Task`], or a [`Skipped`] entry that says why baton cannot run it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::dockerfile::{self, DockerPlan};
use super::error::{EvalError, LoadError, TaskError};
use super::yaml_lite;

/// Harbor's default verifier timeout; TB2 tasks usually set their own.
const HARBOR_DEFAULT_VERIFIER_SEC: f64 = 600.0;
/// Harbor has no default agent timeout; 900 s is what most TB2 tasks use.
const HARBOR_DEFAULT_AGENT_SEC: f64 = 900.0;
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
}

/// One runnable task.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    pub dir: PathBuf,
    pub format: TaskFormat,
    pub instruction: String,
    pub agent_timeout: Duration,
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

/// Loads one task folder. `Err` is a malformed task (bad TOML, missing instruction); a task
/// that is well-formed but needs something baton can't provide is `Ok(Loaded::Skipped)`.
pub fn load(dir: &Path) -> Result<Loaded, LoadError> {
    let loaded = if dir.join("task.toml").is_file() {
        load_harbor(dir)
    } else if dir.join("task.yaml").is_file() {
        load_tb1(dir)
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

fn read_text(path: &Path) -> Result<String, TaskError> {
    std::fs::read_to_string(path).map_err(|e| TaskError::read(path, e))
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

fn toml_env(
    table: Option<&toml::Value>,
    file: &Path,
    section: &str,
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
            toml::Value::String(s) => expand_host_vars(s),
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

/// Harbor's `${VAR}` templating in env values, resolved from the host environment.
fn expand_host_vars(value: &str) -> String {
    #[allow(
        clippy::expect_used,
        reason = "a literal pattern, exercised by the tests"
    )]
    let re = regex::Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}").expect("static regex");
    re.replace_all(value, |c: &regex::Captures| {
        std::env::var(&c[1]).unwrap_or_default()
    })
    .into_owned()
}

fn load_harbor(dir: &Path) -> Result<Loaded, TaskError> {
    let toml_path = dir.join("task.toml");
    let doc: toml::Value = read_text(&toml_path)?
        .parse::<toml::Table>()
        .map(toml::Value::Table)
        .map_err(|e| TaskError::Toml {
            path: toml_path.clone(),
            source: Box::new(e),
        })?;
    let name = doc
        .get("task")
        .and_then(|t| t.get("name"))
        .and_then(|n| n.as_str())
        .map(|n| n.rsplit('/').next().unwrap_or(n).to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| dir_name(dir));
    let instruction_path = dir.join("instruction.md");
    let instruction = read_text(&instruction_path)?;
    if instruction.trim().is_empty() {
        return Err(TaskError::EmptyInstruction {
            path: instruction_path,
        });
    }
    let agent = doc.get("agent");
    let verifier = doc.get("verifier");
    let environment = doc.get("environment");
    let solution = doc.get("solution");
    let agent_timeout =
        toml_number(agent, "timeout_sec", &toml_path)?.unwrap_or(HARBOR_DEFAULT_AGENT_SEC);
    let verifier_timeout =
        toml_number(verifier, "timeout_sec", &toml_path)?.unwrap_or(HARBOR_DEFAULT_VERIFIER_SEC);
    let setup_timeout =
        toml_number(environment, "build_timeout_sec", &toml_path)?.unwrap_or(DEFAULT_SETUP_SEC);
    let allow_internet = match environment.and_then(|e| e.get("allow_internet")) {
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
    let env_vars = toml_env(environment, &toml_path, "environment")?;
    let skip = |reason: String| {
        Ok(Loaded::Skipped(Skipped {
            name: name.clone(),
            dir: dir.to_path_buf(),
            reason,
        }))
    };
    let image = environment
        .and_then(|e| e.get("docker_image"))
        .and_then(|v| v.as_str())
        .filter(|i| !i.is_empty())
        .map(str::to_string);
    let gpus = toml_number(environment, "gpus", &toml_path)?.unwrap_or(0.0);
    if gpus > 0.0 {
        return skip(format!("needs {gpus} GPU(s) in its environment"));
    }

    let env_dir = dir.join("environment");
    let mut plan = EnvironmentPlan {
        workdir: "/app".into(),
        env: env_vars,
        ..Default::default()
    };
    if env_dir.is_dir() {
        if env_dir.join("docker-compose.yaml").is_file()
            || env_dir.join("docker-compose.yml").is_file()
        {
            return skip("its environment is a docker-compose file (several containers)".into());
        }
        let setup = env_dir.join("setup.sh");
        let dockerfile = env_dir.join("Dockerfile");
        // A Dockerfile describes the environment (a pinned `docker_image` is built from it);
        // `setup.sh` without a Dockerfile is the local convention of tools/tbench.
        if dockerfile.is_file() {
            match dockerfile::translate(&read_text(&dockerfile)?, allow_internet) {
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
                    plan.env.extend(local.env);
                }
            }
        } else if let Some(image) = image {
            return skip(format!(
                "needs the prebuilt Docker image '{image}', which baton cannot provide"
            ));
        } else if setup.is_file() {
            plan.files_from = Some(env_dir.clone());
            plan.exclude = vec!["setup.sh".into()];
            plan.setup_script = Some(read_text(&setup)?);
        } else {
            plan.files_from = Some(env_dir.clone());
        }
    } else if let Some(image) = image {
        return skip(format!(
            "needs the prebuilt Docker image '{image}', which baton cannot provide"
        ));
    }

    let solution_dir = dir.join("solution");
    let tests_dir = dir.join("tests");
    if !tests_dir.join("test.sh").is_file() {
        return Err(TaskError::MissingFile {
            dir: dir.to_path_buf(),
            file: "tests/test.sh",
        });
    }
    Ok(Loaded::Ready(Box::new(Task {
        name,
        dir: dir.to_path_buf(),
        format: TaskFormat::Harbor,
        instruction,
        agent_timeout: secs(agent_timeout, &toml_path, "agent.timeout_sec")?,
        verifier_timeout: secs(verifier_timeout, &toml_path, "verifier.timeout_sec")?,
        setup_timeout: secs(setup_timeout, &toml_path, "environment.build_timeout_sec")?,
        allow_internet,
        environment: plan,
        solution_dir: solution_dir
            .join("solve.sh")
            .is_file()
            .then_some(solution_dir),
        solution_script: "solve.sh".into(),
        tests_dir: Some(tests_dir),
        tests_extra_files: Vec::new(),
        test_entry: "test.sh".into(),
        verifier_env: toml_env(verifier, &toml_path, "verifier")?,
        solution_env: toml_env(solution, &toml_path, "solution")?,
    })))
}

fn load_tb1(dir: &Path) -> Result<Loaded, TaskError> {
    let yaml_path = dir.join("task.yaml");
    let doc = yaml_lite::parse(&read_text(&yaml_path)?).map_err(|source| TaskError::Yaml {
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
        let text = read_text(&compose)?;
        if count_compose_services(&text) > 1 {
            return skip("its docker-compose file defines several containers".into());
        }
    }
    let mut plan = EnvironmentPlan {
        workdir: "/app".into(),
        ..Default::default()
    };
    let dockerfile = dir.join("Dockerfile");
    if dockerfile.is_file() {
        // TB1 tasks assume network during the image build; the agent phase is what gets isolated.
        match dockerfile::translate(&read_text(&dockerfile)?, true) {
            DockerPlan::Unsupported(reason) => {
                return skip(format!("{}: {reason}", dockerfile.display()));
            }
            DockerPlan::Local(local) => {
                plan.build_context = Some(dir.to_path_buf());
                plan.setup_script = Some(local.script);
                plan.workdir = local.workdir;
                plan.env = local.env;
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
        dir: dir.to_path_buf(),
        format: TaskFormat::Tb1,
        instruction,
        agent_timeout: secs(agent_timeout, &yaml_path, "max_agent_timeout_sec")?,
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
