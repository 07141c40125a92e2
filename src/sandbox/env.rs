//! The environment a sandboxed command gets: baton's own minus what looks like a credential
//! (by name, and URLs carrying `user:password@`) and minus the variables that point at a
//! socket or agent outside the sandbox (tmux, ssh-agent, D-Bus, Docker, gpg-agent…). One
//! scrub serves the shell tool, `!cmd`, `baton sandbox` and evaluation trials.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use serde::{Deserialize, Serialize};

/// What to keep or drop beyond the built-in patterns (`[sandbox] env_keep` / `env_drop`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvPolicy {
    /// Pass variables named like credentials on (the socket variables are dropped anyway).
    #[serde(default)]
    pub pass_secrets: bool,
    /// Names passed on even though a pattern would drop them.
    #[serde(default)]
    pub keep: Vec<String>,
    /// More names to drop.
    #[serde(default)]
    pub drop: Vec<String>,
}

/// Words that, anywhere in a variable's name, mark it as a credential.
const SECRET_WORDS: &[&str] = &[
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION_ID",
    "PRIVATE",
    "JWT",
    "WEBHOOK",
    "PASSPHRASE",
    "CREDS",
    "MNEMONIC",
    "BEARER",
];

/// Name suffixes and prefixes that mark a credential (`GITHUB_PAT`, `SENTRY_DSN`, `AWS_*`).
const SECRET_SUFFIXES: &[&str] = &[
    "_PAT", "_DSN", "_PASS", "_PWD", "_PW", "_PEM", "_SESSION", "HOOK_URL",
];
/// `OP_SESSION_*`: 1Password's unlocked session.
const SECRET_PREFIXES: &[&str] = &[
    "AWS_",
    "AZURE_",
    "GOOGLE_APPLICATION_",
    "VAULT_",
    "OP_SESSION_",
    // git's configuration from the environment: CI puts `http.extraheader` tokens there.
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_VALUE_",
];
/// Whole names that hold credentials without saying so.
const SECRET_NAMES: &[&str] = &[
    "DATABASE_URL",
    "REDIS_URL",
    "MONGODB_URI",
    "MONGO_URL",
    "AMQP_URL",
    "DSN",
    "PGPASSFILE",
    "NETRC",
    "SSHPASS",
    "PASS",
    "PAT",
    "PGPASS",
];

/// Variables naming a socket, agent or display server outside the sandbox: reaching one
/// would run code or read secrets with none of the sandbox's limits.
pub const SOCKET_VARS: &[&str] = &[
    "TMUX",
    "TMUX_PANE",
    "STY",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "SSH_CONNECTION",
    "SSH_CLIENT",
    "SSH_TTY",
    "DBUS_SESSION_BUS_ADDRESS",
    "DBUS_SYSTEM_BUS_ADDRESS",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "XDG_RUNTIME_DIR",
    "GPG_AGENT_INFO",
    "GNOME_KEYRING_CONTROL",
    "KRB5CCNAME",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "PULSE_SERVER",
    "KITTY_LISTEN_ON",
    "WEZTERM_UNIX_SOCKET",
    "NVIM",
    "NVIM_LISTEN_ADDRESS",
    "VSCODE_IPC_HOOK_CLI",
    "BATON_SANDBOX_HELPER",
];

/// The prefix of a variable meant for the sandboxed command alone: `BATON_COMMAND_ENV_NAME=value`
/// in the environment of whatever starts the sandbox reaches the command as `NAME=value`
/// ([`command_only_unwrapped`], applied by the sandbox helper right before its `exec`). Nothing
/// on the way — baton, bubblewrap, the dynamic loader, libc — reads it under that name, so
/// what a project's MCP server sets (`LD_PRELOAD`, `HOME`, `XDG_CONFIG_HOME`…) acts inside the
/// sandbox only. Such a variable was named on purpose: the credential filter passes it.
pub const COMMAND_ONLY_PREFIX: &str = "BATON_COMMAND_ENV_";

/// `vars` with each command-only variable ([`COMMAND_ONLY_PREFIX`]) under its own name, where
/// it replaces one of that name.
pub fn command_only_unwrapped(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let mut plain: Vec<(OsString, OsString)> = Vec::new();
    let mut own: Vec<(OsString, OsString)> = Vec::new();
    for (name, value) in vars {
        match name.as_bytes().strip_prefix(COMMAND_ONLY_PREFIX.as_bytes()) {
            Some(rest) if !rest.is_empty() => own.push((OsStr::from_bytes(rest).into(), value)),
            Some(_) => {}
            None => plain.push((name, value)),
        }
    }
    plain.retain(|(name, _)| !own.iter().any(|(n, _)| n == name));
    plain.extend(own);
    plain
}

/// Variables the dynamic loader and libc of every process read, and that load code from the
/// paths they name (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `LD_AUDIT`, glibc's `GCONV_PATH`).
/// bubblewrap and the sandbox's helper run before the command's restrictions with the
/// environment they are given: a library a command wrote where such a variable of the user's
/// points (`LD_LIBRARY_PATH=$PWD/build/lib`) would load in them, outside the sandbox, at the
/// next command's start. So these travel to the command under their command-only names.
pub const LOADED_BY_EVERY_PROCESS: &[&str] =
    &["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH"];

/// `vars` with each of [`LOADED_BY_EVERY_PROCESS`] under its command-only name
/// ([`COMMAND_ONLY_PREFIX`]), where no command-only variable of that name is there already.
pub fn loaders_for_the_command_alone(vars: Vec<(OsString, OsString)>) -> Vec<(OsString, OsString)> {
    let wrapped = |name: &OsStr| {
        let mut w = OsString::from(COMMAND_ONLY_PREFIX);
        w.push(name);
        w
    };
    let explicit: Vec<OsString> = vars.iter().map(|(k, _)| k.clone()).collect();
    vars.into_iter()
        .filter_map(|(name, value)| {
            let loader = name
                .to_str()
                .is_some_and(|n| LOADED_BY_EVERY_PROCESS.contains(&n));
            if !loader {
                return Some((name, value));
            }
            let as_command_only = wrapped(&name);
            (!explicit.contains(&as_command_only)).then_some((as_command_only, value))
        })
        .collect()
}

/// Whether a variable name looks like it holds a credential.
pub fn looks_secret(name: &str) -> bool {
    // `GIT_AUTHOR_NAME` and friends are not credentials.
    let upper = name
        .to_ascii_uppercase()
        .replace("AUTHORI", "AUTH")
        .replace("AUTHOR", "");
    SECRET_WORDS.iter().any(|w| upper.contains(w))
        || SECRET_SUFFIXES.iter().any(|s| upper.ends_with(s))
        || SECRET_PREFIXES.iter().any(|p| upper.starts_with(p))
        || SECRET_NAMES.contains(&upper.as_str())
        // Bundler's per-host credentials: `BUNDLE_GITHUB__COM=user:token`.
        || (upper.starts_with("BUNDLE_") && upper.contains("__"))
}

/// Whether a value is a URL with a password in it (`scheme://user:pass@host`, or a
/// connection string's `password=` as JDBC writes it).
pub fn carries_password(value: &OsStr) -> bool {
    let v = value.to_string_lossy();
    let lower = v.to_ascii_lowercase();
    let connection_string = lower.contains("://") || lower.starts_with("jdbc:");
    if connection_string && (lower.contains("password=") || lower.contains("pwd=")) {
        return true;
    }
    // An ODBC or ADO connection string: `Server=…;Uid=…;Pwd=…`.
    if lower.contains(";pwd=") || lower.contains(";password=") {
        return true;
    }
    let Some((_, rest)) = v.split_once("://") else {
        return false;
    };
    // Any user part is a credential: `user:password@`, or a token alone (`https://TOKEN@host`).
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| !userinfo.is_empty())
}

impl EnvPolicy {
    /// Whether `name=value` reaches the command.
    pub fn passes(&self, name: &OsStr, value: &OsStr) -> bool {
        let Some(name) = name.to_str() else {
            return false;
        };
        if self.drop.iter().any(|d| d == name) || SOCKET_VARS.contains(&name) {
            return false;
        }
        if self.pass_secrets || self.keep.iter().any(|k| k == name) {
            return true;
        }
        !looks_secret(name) && !carries_password(value)
    }

    /// The variables of `vars` a command gets.
    pub fn scrub(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        vars.into_iter()
            .filter(|(k, v)| {
                k.as_bytes().starts_with(COMMAND_ONLY_PREFIX.as_bytes()) || self.passes(k, v)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {

    /// The loader variables reach bubblewrap and the helper under their command-only names
    /// (the helper gives them back to the command); one the user named so already wins.
    #[test]
    fn loader_variables_travel_to_the_command_alone() {
        let vars = |list: &[(&str, &str)]| -> Vec<(OsString, OsString)> {
            list.iter().map(|(k, v)| (k.into(), v.into())).collect()
        };
        let out = loaders_for_the_command_alone(vars(&[
            ("LD_PRELOAD", "/ws/evil.so"),
            ("LD_LIBRARY_PATH", "/ws/lib"),
            ("BATON_COMMAND_ENV_LD_LIBRARY_PATH", "/mine"),
            ("LANG", "C"),
        ]));
        assert_eq!(
            out,
            vars(&[
                ("BATON_COMMAND_ENV_LD_PRELOAD", "/ws/evil.so"),
                ("BATON_COMMAND_ENV_LD_LIBRARY_PATH", "/mine"),
                ("LANG", "C"),
            ])
        );
        let back = command_only_unwrapped(out);
        assert!(back.contains(&("LD_PRELOAD".into(), "/ws/evil.so".into())));
        assert!(back.contains(&("LD_LIBRARY_PATH".into(), "/mine".into())));
    }
    use super::*;

    fn passes(name: &str, value: &str) -> bool {
        EnvPolicy::default().passes(OsStr::new(name), OsStr::new(value))
    }

    #[test]
    fn credentials_by_name_and_by_value_are_dropped() {
        for name in [
            "BATON_API_KEY",
            "DATABASE_URL",
            "GITHUB_PAT",
            "HTTP_AUTHORIZATION",
            "NPM_AUTH",
            "AWS_ACCESS_KEY_ID",
            "AWS_PROFILE",
            "SENTRY_DSN",
            "MY_PASSWD",
            // The names the second red team passed through.
            "BW_SESSION",
            "OP_SESSION_my_team",
            "GPG_PASSPHRASE",
            "DEPLOY_CREDS",
            "TLS_CLIENT_PEM",
            // And the third's.
            "PAT",
            "BUNDLE_GITHUB__COM",
        ] {
            assert!(!passes(name, "x"), "{name} passed");
        }
        assert!(!passes(
            "REPORTS_DB",
            "jdbc:postgresql://db:5432/r?user=app&password=hunter2"
        ));
        for name in [
            "GIT_CONFIG_PARAMETERS",
            "GIT_CONFIG_VALUE_0",
            "PGPASS",
            "MY_PW",
            "PASS",
        ] {
            assert!(!passes(name, "x"), "{name} passed");
        }
        for name in ["SLACK_HOOK_URL", "WALLET_MNEMONIC", "API_BEARER"] {
            assert!(!passes(name, "x"), "{name} passed");
        }
        assert!(!passes("REMOTE", "https://ghp_token@github.com/x.git"));
        assert!(!passes("ODBC", "Driver=x;Server=db;Uid=app;Pwd=hunter2"));
        assert!(!passes("UPSTREAM", "https://bob:hunter2@example.com/x"));
        assert!(passes("UPSTREAM", "https://example.com/a@b"));
        assert!(passes("PATH", "/usr/bin"));
        assert!(passes("BUNDLE_PATH", "vendor/bundle"));
        assert!(passes("GIT_AUTHOR_NAME", "A U Thor"));
        assert!(passes("HOME", "/home/u"));
    }

    #[test]
    fn command_only_variables_pass_the_filter_and_take_their_names_last() {
        let os = |(k, v): (&str, &str)| (OsString::from(k), OsString::from(v));
        let vars: Vec<(OsString, OsString)> = [
            ("HOME", "/home/u"),
            ("BATON_COMMAND_ENV_HOME", "/var/empty"),
            ("BATON_COMMAND_ENV_GITHUB_TOKEN", "t"),
            ("BATON_COMMAND_ENV_", "nameless"),
            ("PATH", "/usr/bin"),
        ]
        .into_iter()
        .map(os)
        .collect();
        let scrubbed = EnvPolicy::default().scrub(vars);
        assert_eq!(
            scrubbed.len(),
            5,
            "the filter passes what was named on purpose"
        );
        let unwrapped = command_only_unwrapped(scrubbed);
        let expected: Vec<(OsString, OsString)> = [
            ("PATH", "/usr/bin"),
            ("HOME", "/var/empty"),
            ("GITHUB_TOKEN", "t"),
        ]
        .into_iter()
        .map(os)
        .collect();
        assert_eq!(unwrapped, expected);
    }

    #[test]
    fn socket_variables_are_dropped_even_when_secrets_pass() {
        let p = EnvPolicy {
            pass_secrets: true,
            ..EnvPolicy::default()
        };
        assert!(!p.passes(OsStr::new("TMUX"), OsStr::new("/tmp/tmux-0/default,1,0")));
        assert!(!p.passes(OsStr::new("SSH_AUTH_SOCK"), OsStr::new("/tmp/ssh-x/agent")));
        assert!(p.passes(OsStr::new("GITHUB_TOKEN"), OsStr::new("t")));
    }

    #[test]
    fn keep_and_drop_lists_override_the_patterns() {
        let p = EnvPolicy {
            pass_secrets: false,
            keep: vec!["CARGO_REGISTRY_TOKEN".into()],
            drop: vec!["CORP_PROXY".into()],
        };
        assert!(p.passes(OsStr::new("CARGO_REGISTRY_TOKEN"), OsStr::new("t")));
        assert!(!p.passes(OsStr::new("CORP_PROXY"), OsStr::new("http://p")));
    }
}
