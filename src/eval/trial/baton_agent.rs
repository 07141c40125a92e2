//! What the `baton` agent gets instead of the host's key and endpoint: a gateway that holds them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::eval::gateway::{Gateway, GatewayError};
use crate::eval::isolation::TrialPaths;

/// What the `baton` agent is given instead of the host's key and endpoint.
pub(super) struct BatonAgentSetup {
    /// `BATON_*` variables without any that holds a credential, and the `--pass-env` ones; the
    /// endpoint, when it came from the environment, points at the gateway.
    pub(super) env: BTreeMap<String, String>,
    /// The extra arguments, with `--endpoint` pointing at the gateway.
    pub(super) extra_args: Vec<String>,
    pub(super) gateway: Option<Gateway>,
}

/// The value of `--flag V` or `--flag=V` in `args` (the last one wins, as in clap).
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            found = it.next().map(String::as_str);
        } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            found = Some(v);
        }
    }
    found
}

/// `args` with every `--flag` value replaced by `value`.
fn replace_flag(args: &[String], flag: &str, value: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            out.push(a.clone());
            if it.next().is_some() {
                out.push(value.to_string());
            }
        } else if a.starts_with(&format!("{flag}=")) {
            out.push(format!("{flag}={value}"));
        } else {
            out.push(a.clone());
        }
    }
    out
}

/// `args` without any `--flag V` or `--flag=V`.
fn remove_flag(args: &[String], flag: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            it.next();
        } else if !a.starts_with(&format!("{flag}=")) {
            out.push(a.clone());
        }
    }
    out
}

/// The variable holding the model's API key for a `baton` agent given `extra_args`: what
/// `--api-key-env` names, else `BATON_API_KEY_ENV`, else `BATON_API_KEY` (what the gateway
/// reads, and what a task's `${VAR}` templating must not copy into a trial).
pub(crate) fn api_key_var(extra_args: &[String]) -> String {
    flag_value(extra_args, "--api-key-env")
        .map(str::to_string)
        .or_else(|| std::env::var("BATON_API_KEY_ENV").ok())
        .unwrap_or_else(|| "BATON_API_KEY".into())
}

/// Finds the endpoint and key the agent would use (flags first, then `BATON_*`), starts a
/// gateway that holds the key, and gives the agent the gateway's URL and no credential.
pub(super) fn baton_agent_setup(
    extra_args: &[String],
    pass_env: &[String],
    host_network: bool,
) -> Result<BatonAgentSetup, GatewayError> {
    let key_var = api_key_var(extra_args);
    let key = std::env::var(&key_var)
        .ok()
        .filter(|k| !k.trim().is_empty());
    let mut env = BTreeMap::new();
    for (k, v) in std::env::vars() {
        // `--pass-env` names are the user's explicit choice; the automatic `BATON_*` set
        // leaves out anything that looks like a credential or holds a password, and the
        // variables meant for one sandboxed command of the user's own sessions.
        let automatic = k.starts_with("BATON_")
            && !k.starts_with(crate::sandbox::env::COMMAND_ONLY_PREFIX)
            && !crate::sandbox::env::looks_secret(&k)
            && !crate::sandbox::env::carries_password(std::ffi::OsStr::new(&v));
        let wanted = pass_env.contains(&k) || automatic;
        if wanted && k != key_var && k != "BATON_API_KEY" {
            env.insert(k, v);
        }
    }
    let from_args = flag_value(extra_args, "--endpoint").map(str::to_string);
    let endpoint = from_args
        .clone()
        .or_else(|| env.get("BATON_ENDPOINT").cloned());
    let Some(endpoint) = endpoint else {
        return Ok(BatonAgentSetup {
            env,
            extra_args: extra_args.to_vec(),
            gateway: None,
        });
    };
    let gateway = Gateway::start(&endpoint, key, host_network)?;
    let url = gateway.trial_url().to_string();
    // On the host's loopback the URL holds the gateway's secret path: it goes in the agent's
    // environment, which only its own user may read, never on its command line, which every
    // local user can.
    if env.contains_key("BATON_ENDPOINT") || (host_network && from_args.is_some()) {
        env.insert("BATON_ENDPOINT".into(), url.clone());
    }
    let extra_args = match from_args {
        Some(_) if host_network => remove_flag(extra_args, "--endpoint"),
        Some(_) => replace_flag(extra_args, "--endpoint", &url),
        None => extra_args.to_vec(),
    };
    Ok(BatonAgentSetup {
        env,
        extra_args,
        gateway: Some(gateway),
    })
}

/// Installs the `--hooks` and `--mcp-config` files as the trial user's own: the trial's HOME is
/// fresh, and so they work in the trial as in any `--exec` run.
pub(super) fn install_user_config(
    paths: &TrialPaths,
    hooks: &Option<PathBuf>,
    mcp_config: &Option<PathBuf>,
) -> Result<(), String> {
    for (file, name) in [(hooks, "hooks.json"), (mcp_config, "config.toml")] {
        let Some(file) = file else {
            continue;
        };
        // The trial's setup (a Dockerfile's RUN) wrote its HOME: a link it left on the way
        // (`.config`, `baton`, the file) is never followed, nor written through.
        let copied = std::fs::read(file).and_then(|bytes| {
            let home = crate::untrusted_fs::Dir::open(&paths.home)?;
            let dir = home.dir(Path::new(".config/baton"), Some(0o755))?;
            dir.replace(std::ffi::OsStr::new(name), &bytes, Some(0o644))
        });
        copied.map_err(|e| format!("cannot install {} as {name}: {e}", file.display()))?;
    }
    Ok(())
}

/// The `baton` agent's command line: `--exec --json` in `workdir` with no sandbox or approval
/// of its own (the trial is both), its session under the agent's logs, `extra_args`, then the
/// instruction.
pub(super) fn baton_args(workdir: &str, extra_args: Vec<String>, instruction: &str) -> Vec<String> {
    let mut args = vec![
        "--exec".to_string(),
        "--json".into(),
        "--sandbox".into(),
        "off".into(),
        "--approval".into(),
        "full-auto".into(),
        "-C".into(),
        workdir.to_string(),
        "--session-dir".into(),
        "/logs/agent/sessions".into(),
        // Nobody resumes a trial's session: its summary hop would only delay the end.
        "--defer-summary".into(),
    ];
    args.extend(extra_args);
    // After `--` the instruction is the prompt even when it starts with a dash.
    args.push("--".into());
    args.push(instruction.to_string());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gateway on the host's loopback: its secret URL reaches the agent in its environment,
    /// never on its command line (`/proc/PID/cmdline` is every local user's to read).
    #[test]
    fn a_host_gateways_url_is_never_on_the_agents_command_line() {
        let args = vec![
            "--mode".to_string(),
            "mol".into(),
            "--endpoint".into(),
            "http://127.0.0.1:9/v1".into(),
            "--endpoint=http://127.0.0.1:9/v1".into(),
        ];
        let setup = baton_agent_setup(&args, &[], true).unwrap();
        assert_eq!(setup.extra_args, vec!["--mode".to_string(), "mol".into()]);
        let url = &setup.env["BATON_ENDPOINT"];
        let gateway = setup.gateway.as_ref().unwrap();
        assert_eq!(url, gateway.trial_url());
        assert!(url.ends_with("/v1") && url.len() > "http://127.0.0.1:1/v1".len() + 32);
        // In a namespace of its own the URL is no secret: it stays a flag.
        let setup = baton_agent_setup(&args, &[], false).unwrap();
        assert!(setup.extra_args.iter().any(|a| a.starts_with("--endpoint")));
    }
}
