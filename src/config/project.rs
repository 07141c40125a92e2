//! What a project's `.baton/config.toml` may do on its own. Anything in a workspace can be
//! written by the model's commands, so a project file from a folder the user has not trusted
//! (see `trust`) may only keep or raise safety: the keys that would lower the sandbox,
//! approvals, network, writable roots or the shell, or that would send the user's key or files
//! somewhere else, are withheld and the user is told which.

use std::path::{Path, PathBuf};

use super::defs;
use super::settings::Settings;
use super::trust::{TrustList, TrustStatus, folder_config};
use crate::protocol::{ApprovalPolicy, L0_DEFAULT_TOOLS, SandboxBackend, SandboxMode};

/// The sandbox's own process bound when none is configured (`sandbox::DEFAULT_MAX_PROCESSES`;
/// settings sit below the sandbox layer and cannot name it).
const DEFAULT_MAX_PROCESSES: u32 = 1024;

/// The sandbox's own memory bound in MiB when none is configured.
fn default_max_memory_mib() -> u64 {
    crate::protocol::default_memory_bound() >> 20
}

/// The project file that applies to `workspace`, and those passed over: `.baton/config.toml`
/// in the workspace or the nearest folder above it that holds one, looking above the workspace
/// only inside the user's home (the home folder itself excluded) or in folders the user
/// trusted. A file found in a folder outside that (a shared `/tmp/.baton`, say) is not read.
pub struct Lookup {
    /// The folder holding the file that applies.
    pub folder: Option<PathBuf>,
    /// Files above the workspace that were not read, nearest first.
    pub passed_over: Vec<PathBuf>,
}

pub fn find(workspace: &Path, home: Option<&Path>, trust: &TrustList) -> Lookup {
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let home = home.map(|h| h.canonicalize().unwrap_or_else(|_| h.to_path_buf()));
    let mut passed_over = Vec::new();
    for dir in workspace.ancestors() {
        let file = folder_config(dir);
        if !file.is_file() {
            continue;
        }
        let below_home = home
            .as_deref()
            .is_some_and(|h| dir.starts_with(h) && dir != h);
        if dir == workspace || below_home || trust.entry(dir).is_some() {
            return Lookup {
                folder: Some(dir.to_path_buf()),
                passed_over,
            };
        }
        passed_over.push(file);
    }
    Lookup {
        folder: None,
        passed_over,
    }
}

/// How strict a sandbox mode is: lower is stricter.
fn sandbox_rank(mode: SandboxMode) -> u8 {
    match mode {
        SandboxMode::ReadOnly => 0,
        SandboxMode::WorkspaceWrite => 1,
        SandboxMode::Off => 2,
    }
}

/// How much runs without the user: lower is stricter. `None` is the frontend's default, which
/// asks (the UI) or declines (`--exec`): nothing runs unseen.
fn approval_rank(policy: Option<ApprovalPolicy>) -> u8 {
    match policy {
        None | Some(ApprovalPolicy::Ask) | Some(ApprovalPolicy::Never) => 0,
        Some(ApprovalPolicy::AutoEdit) => 1,
        Some(ApprovalPolicy::FullAuto) => 2,
    }
}

/// Removes from `project` (the file of `folder`) every guarded key whose value is weaker than
/// what `base` (the user's own layers) gives, and returns their names. A value that keeps or
/// raises safety stays: `sandbox = "read-only"`, `network = false`, a smaller process bound, a
/// prompt file inside the folder.
pub fn withhold_lowering(
    project: &mut Settings,
    base: &Settings,
    folder: &Path,
) -> Vec<&'static str> {
    let mut withheld = Vec::new();
    for def in defs::DEFS.iter().filter(|d| d.guarded) {
        if (def.slot.is_set)(project) && weaker(def.key, project, base, folder) {
            (def.slot.clear)(project);
            withheld.push(def.key);
        }
    }
    withheld
}

/// Whether the project's value of the guarded `key` is weaker than what `base` gives. A
/// guarded key without a rule here is weaker whatever its value: only the user sets it.
fn weaker(key: &str, project: &Settings, base: &Settings, folder: &Path) -> bool {
    // Files baton reads and hands to the model: a file outside the folder would be read on
    // the model's behalf (a key, a password store).
    let outside = |p: &Option<PathBuf>| p.as_deref().is_some_and(|p| !inside(p, folder));
    let not_in = |mine: &Option<Vec<String>>, theirs: &Option<Vec<String>>| {
        let theirs = theirs.clone().unwrap_or_default();
        mine.iter().flatten().any(|v| !theirs.contains(v))
    };
    match key {
        "sandbox" => project
            .sandbox
            .is_some_and(|m| sandbox_rank(m) > sandbox_rank(base.sandbox.unwrap_or_default())),
        // The Landlock backend is the named weaker mode: only the user may choose it.
        "sandbox_backend" => {
            project.sandbox_backend == Some(SandboxBackend::Landlock)
                && base.sandbox_backend != Some(SandboxBackend::Landlock)
        }
        // A kept variable reaches every command although it is named like a secret.
        "env_keep" => not_in(&project.env_keep, &base.env_keep),
        "max_memory" => project
            .max_memory
            .is_some_and(|m| m > base.max_memory.unwrap_or_else(default_max_memory_mib)),
        "approval" => approval_rank(project.approval) > approval_rank(base.approval),
        "network" => project.network == Some(true) && base.network != Some(true),
        "login_shell" => project.login_shell == Some(true) && base.login_shell != Some(true),
        "writable" => {
            let mine = base.writable.clone().unwrap_or_default();
            project.writable.iter().flatten().any(|w| !mine.contains(w))
        }
        // More of the home, or a daemon's socket, within a command's reach.
        "readable" => {
            let mine = base.readable.clone().unwrap_or_default();
            project.readable.iter().flatten().any(|r| !mine.contains(r))
        }
        "unix_sockets" => {
            let mine = base.unix_sockets.clone().unwrap_or_default();
            project
                .unix_sockets
                .iter()
                .flatten()
                .any(|r| !mine.contains(r))
        }
        "allow" => not_in(&project.allow, &base.allow),
        // A dropped variable stays dropped: the project may add names, not remove the user's.
        "env_drop" => base
            .env_drop
            .iter()
            .flatten()
            .any(|v| !project.env_drop.iter().flatten().any(|p| p == v)),
        // More tools than the user offers (shell, write_file) is more the model may do. The
        // user's "all" (no list) is never exceeded; L0's default list is `handoff`, `mcp`.
        "tools" => base.tools.is_some() && not_in(&project.tools, &base.tools),
        "l0_tools" | "l1_tools" | "l2_tools" | "l3_tools" => {
            let i = usize::from(key.as_bytes()[1] - b'0');
            let default = (i == 0).then(|| L0_DEFAULT_TOOLS.map(str::to_string).to_vec());
            let mine = base.expert_tools[i].clone().or(default);
            mine.is_some() && not_in(&project.expert_tools[i], &mine)
        }
        "max_processes" => project
            .max_processes
            .is_some_and(|n| n > base.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES)),
        // Where requests go and which variable's secret they carry: only the user's own choice.
        "endpoint" => project.endpoint != base.endpoint,
        "api_key_env" => {
            project.api_key_env.as_deref()
                != Some(base.api_key_env.as_deref().unwrap_or("BATON_API_KEY"))
        }
        // Session files (which undo trusts) must stay where commands cannot write; the
        // workspace decides what commands may write.
        "session_dir" => project.session_dir != base.session_dir,
        "workspace" => project
            .workspace
            .as_deref()
            .is_some_and(|w| !same_folder(w, folder)),
        "system_prompt" => outside(&project.system_prompt),
        "profile" => outside(&project.profile),
        "l0_system_prompt" => outside(&project.expert_system_prompt[0]),
        "l1_system_prompt" => outside(&project.expert_system_prompt[1]),
        "l2_system_prompt" => outside(&project.expert_system_prompt[2]),
        "l3_system_prompt" => outside(&project.expert_system_prompt[3]),
        // Which model drives the agent, and whose weights the unsandboxed process parses:
        // only the user's own choice, like `endpoint` (a repository's `local = "wts"`
        // switched a run the user pointed at an endpoint to the repository's weights).
        "local" => project.local != base.local,
        _ => true,
    }
}

/// Whether a later layer (the environment, a flag) sets `key`, so the project's value would
/// not have applied anyway.
pub fn sets(settings: &Settings, key: &str) -> bool {
    defs::find(key).is_some_and(|d| (d.slot.is_set)(settings))
}

/// The warning for a project file whose guarded keys were withheld.
pub fn withheld_warning(file: &Path, folder: &Path, status: TrustStatus, keys: &[&str]) -> String {
    let names: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
    let why = match status {
        TrustStatus::Changed => "its folder was trusted, but the file changed since",
        TrustStatus::Untrusted | TrustStatus::Trusted => "its folder is not trusted",
    };
    format!(
        "{}: ignored {} ({why}; a project config may not lower the sandbox, approvals, network \
         or shell, nor change where requests and keys go). If you wrote this file: baton trust {}",
        file.display(),
        names.join(", "),
        folder.display()
    )
}

/// The warning for project files above the workspace that were not read.
pub fn passed_over_warning(file: &Path) -> String {
    let folder = file
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"));
    format!(
        "{}: not read (above the workspace, project files are read only from folders inside \
         your home folder; one in /tmp or / may have been written by anyone). If you wrote this \
         file: baton trust {}",
        file.display(),
        folder.display()
    )
}

fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => normalize(a) == normalize(b),
    }
}

/// Whether `path` is `folder` or beneath it, symlinks resolved where the path exists.
fn inside(path: &Path, folder: &Path) -> bool {
    let folder = folder.canonicalize().unwrap_or_else(|_| normalize(folder));
    match path.canonicalize() {
        Ok(p) => p.starts_with(&folder),
        // A missing file fails later with its own error; judged by its name meanwhile.
        Err(_) => path.is_absolute() && normalize(path).starts_with(&folder),
    }
}

/// `..` and `.` resolved by name.
fn normalize(path: &Path) -> PathBuf {
    crate::untrusted_fs::lexical(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(text: &str, folder: &Path) -> Settings {
        let mut s = Settings::default();
        for line in text.lines() {
            let (k, v) = line.split_once('=').expect("key = value");
            s.set(k.trim(), v.trim(), "test", Some(folder))
                .expect("valid");
        }
        s
    }

    #[test]
    fn lowering_keys_are_withheld_and_raising_ones_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        let mut p = project(
            "sandbox = off\napproval = full-auto\nnetwork = true\nlogin_shell = true\n\
             max_processes = 5000\nendpoint = http://evil.example/v1\napi_key_env = GITHUB_PAT\n\
             local = wts\nmodel = m\ntimeout = 9",
            folder,
        );
        let withheld = withhold_lowering(&mut p, &Settings::default(), folder);
        assert_eq!(
            withheld,
            [
                "endpoint",
                "api_key_env",
                "approval",
                "sandbox",
                "local",
                "network",
                "login_shell",
                "max_processes",
            ]
        );
        assert_eq!(p.sandbox, None);
        assert_eq!(p.approval, None);
        assert_eq!(p.endpoint, None);
        assert_eq!(p.model.as_deref(), Some("m"));
        assert_eq!(p.timeout, Some(9));

        let mut p = project(
            "sandbox = read-only\napproval = never\nnetwork = false\nmax_processes = 64",
            folder,
        );
        assert!(withhold_lowering(&mut p, &Settings::default(), folder).is_empty());
        assert_eq!(p.sandbox, Some(SandboxMode::ReadOnly));
        assert_eq!(p.max_processes, Some(64));
    }

    #[test]
    fn sandbox_keys_are_withheld_only_when_they_lower_safety() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        let mut p = project(
            "sandbox_backend = landlock\nenv_keep = DEPLOY_TOKEN\nmax_memory = 100000000",
            folder,
        );
        let withheld = withhold_lowering(&mut p, &Settings::default(), folder);
        assert_eq!(withheld, ["sandbox_backend", "max_memory", "env_keep"]);
        assert_eq!(
            (p.sandbox_backend, p.env_keep, p.max_memory),
            (None, None, None)
        );

        // The default backend and a tighter memory bound raise or keep safety.
        let mut p = project("sandbox_backend = bubblewrap\nmax_memory = 64", folder);
        assert!(withhold_lowering(&mut p, &Settings::default(), folder).is_empty());
        assert_eq!(p.max_memory, Some(64));

        // What the user already chose is not a lowering.
        let mut user = Settings::default();
        for (k, v) in [
            ("sandbox_backend", "landlock"),
            ("env_keep", "DEPLOY_TOKEN"),
            ("max_memory", "2048"),
        ] {
            user.set(k, v, "user", None).expect("set");
        }
        let mut p = project(
            "sandbox_backend = landlock\nenv_keep = DEPLOY_TOKEN\nmax_memory = 2048",
            folder,
        );
        assert!(withhold_lowering(&mut p, &user, folder).is_empty());
        let mut p = project("max_memory = 4096", folder);
        assert_eq!(withhold_lowering(&mut p, &user, folder), ["max_memory"]);
    }

    #[test]
    fn a_project_cannot_show_more_of_the_home_or_a_host_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        let text = "readable = /home/me/.ssh\nunix_sockets = /var/run/docker.sock";
        let mut p = project(text, folder);
        let withheld = withhold_lowering(&mut p, &Settings::default(), folder);
        assert_eq!(withheld, ["readable", "unix_sockets"]);
        assert_eq!((p.readable, p.unix_sockets), (None, None));
        // Entries the user gave already are theirs.
        let mut user = Settings::default();
        user.set("readable", "/home/me/.ssh", "user", None)
            .expect("set");
        user.set("unix_sockets", "/var/run/docker.sock", "user", None)
            .expect("set");
        let mut p = project(text, folder);
        assert!(withhold_lowering(&mut p, &user, folder).is_empty());
    }

    #[test]
    fn what_the_user_already_allows_is_not_a_lowering() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        let mut user = Settings::default();
        user.set("approval", "full-auto", "user", None)
            .expect("set");
        user.set("network", "true", "user", None).expect("set");
        user.set("allow", "cargo test", "user", None).expect("set");
        let mut p = project(
            "approval = auto-edit\nnetwork = true\nallow = cargo test",
            folder,
        );
        assert!(withhold_lowering(&mut p, &user, folder).is_empty());
        let mut p = project("allow = curl", folder);
        assert_eq!(withhold_lowering(&mut p, &user, folder), ["allow"]);
    }

    /// Red team (today's round): a project replaced the user's `env_drop` (a dropped variable
    /// reached commands again) and offered tools the user had not (`tools`, `lN_tools`).
    #[test]
    fn a_project_cannot_undrop_variables_or_offer_more_tools() {
        let folder = Path::new("/src/app");
        let mut user = Settings::default();
        user.set("env_drop", "PLAINVAR", "u", None).unwrap();
        user.set("tools", "read_file,list_dir", "u", None).unwrap();
        let mut p = project(
            "env_drop = NOTHING\ntools = shell,write_file\nl0_tools = handoff,shell\n\
             l2_tools = shell",
            folder,
        );
        let withheld = withhold_lowering(&mut p, &user, folder);
        assert_eq!(withheld, ["l0_tools", "env_drop", "tools"]);
        // l2_tools: the user offers L2 every tool, so a list is a narrowing.
        assert_eq!(p.expert_tools[2], Some(vec!["shell".to_string()]));
        // Dropping more, offering less: kept.
        let mut p = project(
            "env_drop = PLAINVAR,MORE\ntools = read_file\nl0_tools = handoff",
            folder,
        );
        assert!(withhold_lowering(&mut p, &user, folder).is_empty());
    }

    #[test]
    fn files_outside_the_folder_are_withheld() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path().join("proj");
        std::fs::create_dir_all(&folder).expect("mkdir");
        std::fs::write(folder.join("p.md"), "x").expect("write");
        std::fs::write(dir.path().join("secret"), "x").expect("write");
        // A link inside the folder to a file outside it is outside.
        std::os::unix::fs::symlink(dir.path().join("secret"), folder.join("link")).expect("ln");
        for (value, withheld) in [
            ("p.md", false),
            ("../secret", true),
            ("link", true),
            ("/etc/passwd", true),
            ("missing/../../secret", true),
        ] {
            let mut p = project(&format!("system_prompt = {value}"), &folder);
            let got = withhold_lowering(&mut p, &Settings::default(), &folder);
            assert_eq!(!got.is_empty(), withheld, "{value}");
        }
    }

    #[test]
    fn parents_outside_the_home_folder_are_passed_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canon");
        let home = root.join("home");
        let in_home = home.join("work/proj");
        let shared = root.join("shared/ws");
        for d in [&in_home, &shared] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        for d in [root.join("shared"), home.join("work"), home.clone()] {
            std::fs::create_dir_all(d.join(".baton")).expect("mkdir");
            std::fs::write(folder_config(&d), "model = \"m\"\n").expect("write");
        }
        let trust = TrustList::default();
        let found = find(&in_home, Some(&home), &trust);
        assert_eq!(found.folder, Some(home.join("work")));
        let found = find(&shared, Some(&home), &trust);
        assert_eq!(found.folder, None);
        assert_eq!(found.passed_over, [folder_config(&root.join("shared"))]);
        // The home folder's own `.baton` is not a project file for the folders below it.
        let below = home.join("other");
        std::fs::create_dir_all(&below).expect("mkdir");
        assert_eq!(find(&below, Some(&home), &trust).folder, None);
        // A trusted parent is read wherever it is.
        let mut trust = TrustList::default();
        trust.trust(&root.join("shared"));
        assert_eq!(
            find(&shared, Some(&home), &trust).folder,
            Some(root.join("shared"))
        );
    }
}
