//! `baton eval`: arguments, loading and filtering tasks, choosing the isolation, running the
//! job and printing the summary.

use crate::protocol::stdio::{eprintln, println};
use std::path::PathBuf;

use crate::eval::error::EvalError;
use crate::eval::isolation::{Isolation, IsolationChoice, IsolationKind};
use crate::eval::job::{self, JobConfig, JobReport};
use crate::eval::report;
use crate::eval::task;
use crate::eval::trial::{AgentKind, BatonOptions, TrialSettings};
use crate::protocol::terminal_safe_line;

/// Run Terminal-Bench / Harbor format tasks and score an agent on them.
#[derive(Debug, Clone, clap::Args)]
pub struct EvalArgs {
    /// Task folders, or folders of tasks (Harbor `task.toml` or TB1 `task.yaml`).
    #[arg(required = true, value_name = "TASKS")]
    pub tasks: Vec<PathBuf>,
    /// Who solves the tasks: baton, oracle (reference solution), nop (nothing) or
    /// cmd:"SHELL COMMAND" (the instruction is in $INSTRUCTION).
    #[arg(long, default_value = "baton")]
    pub agent: String,
    /// Trials per task.
    #[arg(short = 'k', long, default_value_t = 1)]
    pub trials: usize,
    /// Trials run at the same time.
    #[arg(short = 'n', long, default_value_t = 1)]
    pub concurrency: usize,
    /// Folder that receives the job folder.
    #[arg(long, default_value = "jobs")]
    pub out: PathBuf,
    /// Name of the job folder (default: the UTC time).
    #[arg(long)]
    pub job_name: Option<String>,
    /// Continue the stopped job NAME under --out (killed, or interrupted with Ctrl-C): its
    /// finished trials are kept, the others run; give the tasks and agent of the first run.
    /// (`--resume` is baton's, for sessions.)
    #[arg(long, value_name = "NAME", conflicts_with = "job_name")]
    pub resume_job: Option<String>,
    /// Scales every task's agent, verifier and setup timeouts (leaderboards require 1).
    #[arg(long, default_value_t = 1.0)]
    pub timeout_multiplier: f64,
    /// Run only tasks whose name matches one of these globs.
    #[arg(long)]
    pub include: Vec<String>,
    /// Leave out tasks whose name matches one of these globs.
    #[arg(long)]
    pub exclude: Vec<String>,
    /// The baton binary the `baton` agent runs (default: this executable).
    #[arg(long, value_name = "PATH")]
    pub baton_bin: Option<PathBuf>,
    /// One more argument for `baton --exec` (repeatable), e.g. --exec-arg=--endpoint=URL.
    #[arg(long = "exec-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub exec_args: Vec<String>,
    /// A hooks.json the `baton` agent runs with in every trial (the trial's HOME is fresh).
    #[arg(long, value_name = "FILE")]
    pub hooks: Option<PathBuf>,
    /// A TOML file of `[mcp_servers.NAME]` tables (config.toml's format, nothing else) whose
    /// servers the `baton` agent starts in every trial.
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// Host environment variables passed to the agent (BATON_* and OPENAI_* always are).
    #[arg(long, value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Host environment variables a task's `env` tables may take with `${NAME}` (no other is
    /// given to tasks; the model's API key never is).
    #[arg(long, value_name = "NAME")]
    pub task_env: Vec<String>,
    /// Where trials run: the trial emulator under bubblewrap (`bwrap`; `auto` falls back to
    /// plain folders where bwrap cannot work), plain folders (`none`), or a container of the
    /// task's image built by `podman` or `docker`.
    #[arg(
        long = "env",
        visible_alias = "isolation",
        value_enum,
        default_value = "auto"
    )]
    pub isolation: IsolationChoice,
    /// Host paths made visible read-only inside the sandbox.
    #[arg(long, value_name = "PATH")]
    pub share: Vec<PathBuf>,
    /// Keep each trial's /app, HOME and /tmp after the trial.
    #[arg(long)]
    pub keep_workdirs: bool,
    /// Exit with 1 when the score is below this fraction (0..1).
    #[arg(long)]
    pub min_score: Option<f64>,
    /// No progress output on stderr.
    #[arg(long)]
    pub no_progress: bool,
    /// List the tasks that would run (and the skipped ones, with why), then exit.
    #[arg(long)]
    pub list: bool,
    /// Arguments after `--` go to `baton --exec` as well (e.g. -- --endpoint URL --mode mol).
    #[arg(last = true, value_name = "EXEC_ARGS")]
    pub trailing_exec_args: Vec<String>,
}

/// Runs `baton eval`; returns the process exit code (0 done, 1 below --min-score, 2 usage or
/// setup error).
pub fn run(args: EvalArgs) -> i32 {
    if args.list {
        return match load_tasks(&args) {
            Ok(set) => {
                for t in &set.tasks {
                    let agent = t
                        .agent_timeout
                        .map_or("none".to_string(), |d| format!("{:.0} s", d.as_secs_f64()));
                    println!(
                        "{}\t{}\tagent {agent}\tverifier {:.0} s\t{}",
                        terminal_safe_line(&t.name),
                        t.format.as_str(),
                        t.verifier_timeout.as_secs_f64(),
                        terminal_safe_line(&t.dir.display().to_string())
                    );
                }
                for s in &set.skipped {
                    println!(
                        "{}\tskipped\t{}",
                        terminal_safe_line(&s.name),
                        terminal_safe_line(&s.reason)
                    );
                }
                for e in &set.failed {
                    println!(
                        "{}\terror\t{}",
                        terminal_safe_line(&e.task_name()),
                        terminal_safe_line(&e.to_string())
                    );
                }
                eprintln!(
                    "baton eval: {} runnable, {} skipped, {} cannot load",
                    set.tasks.len(),
                    set.skipped.len(),
                    set.failed.len()
                );
                0
            }
            Err(e) => {
                eprintln!("baton eval: {e}");
                2
            }
        };
    }
    // Checked once here: a broken hooks file would otherwise fail every trial the same way.
    if let Some(file) = &args.hooks {
        let found = crate::hooks::Discovery {
            user: Some(file.clone()),
            project: None,
            project_bytes: None,
        };
        if let Err(e) = crate::hooks::Hooks::load(&found) {
            eprintln!("baton eval: --hooks: {e}");
            return 2;
        }
    }
    // Checked once here too, and only MCP servers: the file becomes each trial's user config.
    if let Some(file) = &args.mcp_config
        && let Err(e) = check_mcp_config(file)
    {
        eprintln!("baton eval: --mcp-config: {e}");
        return 2;
    }
    let prepared = prepare(&args).map(|mut cfg| {
        // Ctrl-C (or SIGTERM) ends the running trials and writes what ran; a second one ends
        // baton at once.
        crate::eval::process::on_interrupt();
        cfg.settings.cancel = &crate::eval::process::INTERRUPTED;
        cfg
    });
    match prepared.and_then(job::run_job) {
        Ok(report) => {
            let mut stdout = std::io::stdout().lock();
            let _ = report::print_table(
                &mut stdout,
                &report.tasks,
                &report.score,
                &skipped_of(&report),
                &report.load_errors,
                report.wall_sec,
                &report.job_dir,
            );
            if report.interrupted {
                eprintln!(
                    "baton eval: interrupted: {} trial(s) never started; the partial results are in {}",
                    report.n_pending_trials,
                    report.job_dir.join("result.json").display()
                );
                return 130;
            }
            // Errored trials and tasks that cannot load count as failures for the gate.
            match args.min_score {
                Some(min) if report.score.strict_accuracy.unwrap_or(0.0) < min => 1,
                _ => 0,
            }
        }
        Err(e) => {
            eprintln!("baton eval: {e}");
            2
        }
    }
}

fn skipped_of(report: &JobReport) -> Vec<task::Skipped> {
    report
        .skipped
        .iter()
        .map(|s| task::Skipped {
            name: s.task.clone(),
            dir: s.task_dir.clone(),
            reason: s.reason.clone(),
        })
        .collect()
}

/// Loads the tasks and builds the job configuration (also used by tests).
pub fn prepare(args: &EvalArgs) -> Result<JobConfig, EvalError> {
    if args.trials == 0 {
        return Err(EvalError::NoTrials);
    }
    if !(args.timeout_multiplier.is_finite() && args.timeout_multiplier > 0.0) {
        return Err(EvalError::TimeoutMultiplier(args.timeout_multiplier));
    }
    let binary = match &args.baton_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(EvalError::CurrentExe)?,
    };
    let mut exec_args = args.exec_args.clone();
    exec_args.extend(args.trailing_exec_args.iter().cloned());
    let agent = AgentKind::parse(
        &args.agent,
        BatonOptions {
            binary: binary.clone(),
            extra_args: exec_args,
            pass_env: args.pass_env.clone(),
            hooks: args.hooks.clone(),
            mcp_config: args.mcp_config.clone(),
        },
    )?;
    let set = load_tasks(args)?;
    for s in &set.skipped {
        eprintln!(
            "baton eval: skipping {}: {}",
            terminal_safe_line(&s.name),
            terminal_safe_line(&s.reason)
        );
    }
    for e in &set.failed {
        eprintln!(
            "baton eval: cannot load {}: {}",
            terminal_safe_line(&e.task_name()),
            terminal_safe_line(&e.to_string())
        );
    }
    let network_env = crate::eval::trial::network_env(std::env::vars());
    let mut shared = args.share.clone();
    shared.extend(crate::eval::trial::network_files(&network_env));
    // The binary alone, not its folder: a build folder (`target/debug`) holds every test
    // binary and build artifact of the host, which a task's commands could then read.
    if matches!(agent, AgentKind::Baton { .. }) {
        shared.push(binary.clone());
    }
    let mut isolation = Isolation::detect(args.isolation, shared).map_err(EvalError::Isolation)?;
    isolation.keep_out(
        set.tasks
            .iter()
            .map(|t| t.dir.clone())
            .chain(std::iter::once(args.out.clone()))
            .chain(std::env::var_os("TMPDIR").map(PathBuf::from)),
    );
    if isolation.kind == IsolationKind::Plain {
        eprintln!(
            "baton eval: WARNING: trials are NOT isolated ({}); each runs in its own folder with HOME and TMPDIR set, and /app, /tests, /logs are rewritten to those folders",
            isolation.fallback_reason.as_deref().unwrap_or("no sandbox")
        );
    }
    let job_dir = match args.resume_job.as_deref() {
        Some(name) => {
            let dir = args.out.join(name);
            if !dir.join("config.json").is_file() {
                return Err(EvalError::Resume(format!(
                    "{} holds no job (no config.json)",
                    dir.display()
                )));
            }
            dir
        }
        None => job::new_job_dir(&args.out, args.job_name.as_deref())?,
    };
    Ok(JobConfig {
        tasks: set.tasks,
        skipped: set.skipped,
        failed: set.failed,
        trials: args.trials,
        concurrency: args.concurrency.max(1),
        job_dir,
        settings: TrialSettings {
            agent,
            timeout_multiplier: args.timeout_multiplier,
            keep_workdirs: args.keep_workdirs,
            isolation,
            network_env,
            cancel: &crate::eval::process::NEVER,
        },
        progress: !args.no_progress,
        resume: args.resume_job.is_some(),
    })
}

/// Discovers, filters and loads the tasks ([`task::load_set`]).
pub fn load_tasks(args: &EvalArgs) -> Result<task::TaskSet, EvalError> {
    let envs = match args.isolation {
        IsolationChoice::Podman | IsolationChoice::Docker => task::Environments::Images,
        _ => task::Environments::Emulated,
    };
    // The key the `baton` agent's gateway reads is hidden from the tasks' `${VAR}` (named by
    // these arguments even for another agent: hiding one variable too many is harmless).
    let agent_args: Vec<String> = args
        .exec_args
        .iter()
        .chain(&args.trailing_exec_args)
        .cloned()
        .collect();
    let host = task::HostVars::for_agent(&agent_args, &args.task_env);
    task::load_set(&args.tasks, &args.include, &args.exclude, envs, &host)
}

/// An `--mcp-config` file holds `[mcp_servers.NAME]` tables and nothing else (it is installed
/// as each trial's user config.toml, which must not change anything else about the agent), and
/// every entry parses.
fn check_mcp_config(file: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if let Some(other) = table
        .keys()
        .find(|k| k.as_str() != crate::config::mcp::SECTION)
    {
        return Err(format!(
            "{}: only [{}.NAME] tables belong here, not `{other}`",
            file.display(),
            crate::config::mcp::SECTION
        ));
    }
    crate::config::mcp::read_toml(file)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    /// `baton eval` is wired as a subcommand of the root CLI, whose options are global: no name
    /// may clash, and the trailing `--` arguments must reach `baton --exec`.
    #[test]
    fn eval_args_fit_under_the_root_cli() {
        let root = crate::cli::Cli::command();
        root.clone().debug_assert();
        let m = root
            .try_get_matches_from([
                "baton",
                "eval",
                "tools/tbench",
                "--agent",
                "cmd:echo hi",
                "-k",
                "3",
                "-n",
                "2",
                "--exclude",
                "perf-*",
                "--exec-arg=--max-turns=40",
                "--",
                "--mode",
                "mol",
            ])
            .expect("parses");
        let (_, sub) = m.subcommand().expect("eval");
        let a = EvalArgs::from_arg_matches(sub).expect("eval args");
        assert_eq!(a.trials, 3);
        assert_eq!(a.concurrency, 2);
        assert_eq!(a.agent, "cmd:echo hi");
        assert_eq!(a.exec_args, vec!["--max-turns=40"]);
        assert_eq!(a.trailing_exec_args, vec!["--mode", "mol"]);
        assert_eq!(a.exclude, vec!["perf-*"]);
        // The root's own options read back too: an eval option with a global one's id (a
        // bool `resume` beside baton's `--resume ID`) made clap panic in every baton run.
        crate::cli::Cli::from_arg_matches(&m).expect("root args");
        let m = crate::cli::Cli::command()
            .try_get_matches_from(["baton", "eval", "t", "--resume-job", "j1"])
            .expect("parses");
        crate::cli::Cli::from_arg_matches(&m).expect("root args");
        let (_, sub) = m.subcommand().expect("eval");
        let a = EvalArgs::from_arg_matches(sub).expect("eval args");
        assert_eq!(a.resume_job.as_deref(), Some("j1"));
    }
}
