//! `baton doctor`: checks the configuration, the profile, the endpoint and its models, and
//! says in plain words what is wrong and what to do.

use super::exit;
use crate::backend::BackendError;
use crate::config::{Config, ConfigLoadError};
use crate::protocol::Expert;
use crate::protocol::Mode;

struct Report {
    problems: usize,
}

impl Report {
    fn ok(&self, what: &str) {
        println!("  ok       {what}");
    }
    fn bad(&mut self, what: &str) {
        self.problems += 1;
        println!("  PROBLEM  {what}");
    }
    fn note(&self, what: &str) {
        println!("  note     {what}");
    }
}

/// Runs every check. `config_problems` are the configuration mistakes found while loading:
/// the layer each came from was left out of `config`, and the checks run on the rest.
pub async fn run(config: &Config, config_problems: &[ConfigLoadError]) -> i32 {
    let mut r = Report { problems: 0 };
    println!("configuration");
    for e in config_problems {
        r.bad(&format!("{e} (left out: the checks below run without it)"));
    }
    if config.files.is_empty() && config_problems.is_empty() {
        r.note("no config file found (flags, BATON_* variables and defaults only)");
    }
    for f in &config.files {
        r.ok(&format!("{} is valid", f.display()));
    }
    r.ok(&format!("workspace {}", config.workspace.display()));
    let writable = std::fs::create_dir_all(&config.session_dir)
        .and_then(|_| tempfile::tempfile_in(&config.session_dir).map(|_| ()));
    match writable {
        Ok(()) => r.ok(&format!("sessions go to {}", config.session_dir.display())),
        Err(e) => r.bad(&format!(
            "cannot write sessions to {}: {e} (set session_dir or --session-dir)",
            config.session_dir.display()
        )),
    }
    match crate::app::system_prompt(config) {
        Ok(_) => r.ok(match &config.system_prompt {
            Some(_) => "system prompt file readable",
            None => "built-in system prompt",
        }),
        Err(e) => r.bad(&e.to_string()),
    }

    for f in &crate::app::project_instructions(config).files {
        r.ok(&format!("project instructions from {}", f.display()));
    }

    println!("sandbox");
    if config.sandbox == crate::protocol::SandboxMode::Off {
        r.note("sandbox is off: commands run with your full permissions (--sandbox off)");
    } else {
        let support = crate::sandbox::probe::probe_backend(config.sandbox_backend);
        for line in support.report() {
            if support.enforceable {
                r.ok(&line);
            } else {
                r.bad(&line);
            }
        }
    }

    println!("profile");
    match (&config.profile, crate::app::profile(config)) {
        (_, Err(e)) => r.bad(&e.to_string()),
        (Some(dir), Ok(_)) => r.ok(&format!("{} is a valid MoL profile", dir.display())),
        (None, Ok(_)) => r.ok("built-in default profile"),
    }

    println!("model");
    let backend = match crate::app::build_backend(config).map(|(b, _)| b) {
        Ok(b) => b,
        Err(e) => {
            r.bad(&e.to_string());
            return finish(&r);
        }
    };
    if config.api_key().is_some() {
        r.ok(&format!("API key found in ${}", config.api_key_env));
    } else {
        r.note(&format!(
            "${} is not set: requests go without an API key",
            config.api_key_env
        ));
    }
    let listing =
        tokio::time::timeout(std::time::Duration::from_secs(15), backend.list_models()).await;
    match listing {
        Err(_) => r.bad(&format!(
            "models probe: {} did not answer GET /models within 15 s",
            backend.describe()
        )),
        Ok(Err(e)) => r.bad(&models_probe_error(&e)),
        Ok(Ok(models)) => {
            let names: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
            r.ok(&format!(
                "{} is reachable and lists {} model(s): {}",
                backend.describe(),
                names.len(),
                names.join(", ")
            ));
            match config.mode {
                Mode::Mol => {
                    let missing: Vec<&str> = Expert::ALL
                        .iter()
                        .map(|e| e.label())
                        .filter(|l| !names.contains(l))
                        .collect();
                    if missing.is_empty() {
                        r.ok("all four experts L0–L3 are served (mode mol)");
                    } else {
                        r.bad(&format!(
                            "mode mol needs the adapters L0–L3 as model names; missing: {}. \
                             Register them with the engine (vLLM --lora-modules L0=… ), or use \
                             --mode proxy/single --model NAME",
                            missing.join(", ")
                        ));
                    }
                }
                Mode::Proxy | Mode::Single => {
                    let model = config.model.as_deref().unwrap_or("");
                    if names.contains(&model) {
                        r.ok(&format!("model {model} is served"));
                    } else {
                        r.bad(&format!(
                            "model '{model}' is not among the served models; pick one of: {}",
                            names.join(", ")
                        ));
                    }
                }
            }
        }
    }
    finish(&r)
}

/// A failed `GET /models`, named as the models probe it is (the backend's message names a hop,
/// and listing models is none of the turn's hops).
fn models_probe_error(e: &BackendError) -> String {
    let what = match e {
        BackendError::Connect { url, message, .. } => {
            format!("cannot connect to {url}: {message}")
        }
        BackendError::Timeout {
            url, secs, what, ..
        } => {
            format!("{url} did not answer within {secs} s ({what})")
        }
        BackendError::Http {
            url, status, body, ..
        } => format!("GET {url} answered HTTP {status}: {body}"),
        BackendError::Protocol { url, message, .. } => {
            format!("bad response from GET {url}: {message}")
        }
        BackendError::ContextOverflow { url, message, .. } => format!("{url}: {message}"),
        BackendError::Engine { message, .. } => format!("local engine: {message}"),
        BackendError::Cancelled { .. } => "cancelled".to_string(),
    };
    format!("models probe: {what}")
}

fn finish(r: &Report) -> i32 {
    if r.problems == 0 {
        println!("All checks passed.");
        exit::OK
    } else {
        println!("{} problem(s) found.", r.problems);
        exit::AGENT_ERROR
    }
}
