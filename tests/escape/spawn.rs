//! What baton itself starts outside the sandbox must not be something the workspace chose: the
//! audit's `git` found first in an activated in-project `.venv/bin`, a user's MCP server that
//! imports `./mod.py` (`python -m`) or runs `./node_modules/.bin/pkg` (`npx -y`), a user's hook
//! that does either. Each test plants the program or module where a command could have, then
//! checks that it never ran (it would append to a marker outside the workspace) while the
//! user's own one did.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::env::Env;
use crate::support::{MockEngine, Script, external, outside};

/// An executable script at `at` (folders created).
fn script(at: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
    std::fs::write(at, text).expect("write");
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A Python module that appends `line` to `marker` when imported.
fn module(at: &Path, marker: &Path, line: &str) {
    std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        at,
        format!(
            "open({:?}, 'a').write({:?} + '\\n')\n",
            marker.display().to_string(),
            line
        ),
    )
    .expect("write");
}

/// The first `name` in the tests' PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The Python interpreter itself (not a pyenv shim, which needs the tester's home).
fn python() -> Option<PathBuf> {
    let python3 = on_path("python3")?;
    let out = Command::new(python3)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let exe = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    exe.is_file().then_some(exe)
}

/// PATH with `first` in front of the tests' own.
fn path_with(first: &[&Path]) -> OsString {
    let mut dirs: Vec<PathBuf> = first.iter().map(|p| p.to_path_buf()).collect();
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).expect("join PATH")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Finding 2: with the workspace's `.venv/bin` first in PATH (an activated venv, direnv), the
/// audit's second opinion ran the `git` a command put there, as the user, unsandboxed, in the
/// same turn. Old code: the marker held `config --no-includes --null --list --file …`.
#[test]
fn the_audit_never_runs_a_git_planted_in_a_workspace_path_entry() {
    if !baton::sandbox::probe().enforceable {
        eprintln!("SANDBOX NOT ENFORCEABLE HERE — skipped (the refusal is asserted elsewhere)");
        return;
    }
    let Some(real_git) = on_path("git") else {
        panic!("git is needed for the sandbox suite");
    };
    let root = tempfile::Builder::new()
        .prefix("baton-spawn")
        .tempdir_in(outside::fixture_base())
        .expect("tempdir");
    let base = root.path().canonicalize().expect("canon");
    let ws = base.join("ws");
    let home = base.join("home");
    let marker = base.join("outside/marker");
    for d in [&ws, &home, &base.join("outside")] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    // What a command left in the activated venv: a `git` that notes who ran it, then does the
    // real thing (inside the sandbox the marker's folder is read-only, so only a run outside
    // leaves a line).
    script(
        &ws.join(".venv/bin/git"),
        &format!(
            "#!/bin/sh\n{{ echo \"ran: $*\" >> '{}'; }} 2>/dev/null\nexec '{}' \"$@\"\n",
            marker.display(),
            real_git.display()
        ),
    );
    let venv = ws.join(".venv/bin");
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "sandbox",
            "--",
            "sh",
            "-c",
            "git init -q sub && git -C sub config core.fsmonitor /nowhere && echo planted",
        ])
        .current_dir(&ws)
        .env("PATH", path_with(&[&venv]))
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .stdin(Stdio::null())
        .output()
        .expect("run baton sandbox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("planted"), "{stdout}\n{stderr}");
    assert!(
        !marker.exists(),
        "baton ran the git planted in the workspace's PATH entry: {}",
        read(&marker)
    );
    // The audit still did its work, with the real git.
    assert!(
        stderr.contains("core.fsmonitor") && stderr.contains("commented out"),
        "{stderr}"
    );
    let config = read(&ws.join("sub/.git/config"));
    assert!(config.contains("# disabled by baton"), "{config}");
}

/// A user config naming `server` (TOML for one `[mcp_servers.helper]` table), endpoint unused.
fn user_server(env: &Env, server: &str) {
    env.user_config(&format!(
        "endpoint = \"http://127.0.0.1:9/v1\"\n[mcp_servers.helper]\n{server}\
         startup_timeout_sec = 30\n"
    ));
}

fn q(s: impl AsRef<str>) -> String {
    toml::Value::String(s.as_ref().to_string()).to_string()
}

/// A mock engine that routes every turn to L2 and answers `ok`.
pub(super) fn answering_ok() -> MockEngine {
    MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .default_answer("ok")
            .default_summary("s"),
    )
}

/// Installs `hooks` (a hooks.json document) as the user's hooks.
fn user_hooks(env: &Env, hooks: &Value) {
    std::fs::create_dir_all(env.home.join(".config/baton")).expect("mkdir");
    std::fs::write(env.home.join(".config/baton/hooks.json"), hooks.to_string()).expect("hooks");
}

/// Finding 3, Python: the user's own server, `python3 -m mymcp` with its module in a folder of
/// theirs (PYTHONPATH), started in the workspace, imported a `mymcp.py` one `write_file` put
/// there (`-m` puts the working directory first on `sys.path`). No trust is asked for the
/// user's servers, so a cloned repository was enough. Old code: the planted module ran.
#[test]
fn a_users_python_m_server_imports_no_module_planted_in_the_workspace() {
    let Some(python) = external::require("python3", python()) else {
        return;
    };
    let env = Env::new();
    let outside = env.home.parent().expect("root").join("markers");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let (pwned, ran) = (outside.join("pwned"), outside.join("user-server-ran"));
    let tools = env.home.join("tools");
    module(&tools.join("mymcp.py"), &ran, "the user's module");
    module(&env.workspace.join("mymcp.py"), &pwned, "planted");
    user_server(
        &env,
        &format!(
            "command = {}\nargs = [\"-m\", \"mymcp\"]\nenv = {{ PYTHONPATH = {} }}\n",
            q(python.display().to_string()),
            q(tools.display().to_string())
        ),
    );
    let out = env.session_baton().arg("doctor").output().expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("helper"), "{text}");
    assert!(
        !pwned.exists(),
        "the user's server imported the workspace's module: {}\n{text}",
        read(&pwned)
    );
    assert!(ran.exists(), "the user's own module did not run: {text}");
}

/// Finding 3, npm: `npx -y PKG` (the docs' own example) prefers a package of the project it
/// runs in: started in the workspace, it ran a `node_modules/PKG` a command planted. Offline,
/// so no registry is asked; the server then fails to start, which is fine here.
#[test]
fn a_users_npx_server_runs_no_package_planted_in_the_workspace() {
    let Some(npx) = external::require("npx", on_path("npx")) else {
        return;
    };
    let env = Env::new();
    let pwned = env.home.parent().expect("root").join("pwned");
    let ws = &env.workspace;
    std::fs::write(
        ws.join("package.json"),
        json!({"name": "ws", "version": "1.0.0",
               "dependencies": {"planted-mcp-server": "1.0.0"}})
        .to_string(),
    )
    .expect("package.json");
    let pkg = ws.join("node_modules/planted-mcp-server");
    std::fs::create_dir_all(&pkg).expect("mkdir");
    std::fs::write(
        pkg.join("package.json"),
        json!({"name": "planted-mcp-server", "version": "1.0.0",
               "bin": {"planted-mcp-server": "x.js"}})
        .to_string(),
    )
    .expect("package.json");
    script(
        &pkg.join("x.js"),
        &format!(
            "#!/usr/bin/env node\nrequire('fs').appendFileSync({:?}, 'planted\\n');\n",
            pwned.display().to_string()
        ),
    );
    std::fs::create_dir_all(ws.join("node_modules/.bin")).expect("mkdir");
    std::os::unix::fs::symlink(
        "../planted-mcp-server/x.js",
        ws.join("node_modules/.bin/planted-mcp-server"),
    )
    .expect("link");
    user_server(
        &env,
        &format!(
            "command = {}\nargs = [\"-y\", \"planted-mcp-server\"]\n\
             env = {{ npm_config_offline = \"true\", npm_config_update_notifier = \"false\" }}\n",
            q(npx.display().to_string())
        ),
    );
    let out = env.session_baton().arg("doctor").output().expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("helper"), "{text}");
    assert!(
        !pwned.exists(),
        "the user's npx server ran the workspace's package: {}\n{text}",
        read(&pwned)
    );
}

/// Hooks run outside the sandbox too: a user's hook naming a program (`hooktool`) or a module
/// (`python -m hookmod`) ran the copy in the workspace — an activated `bin/` first in PATH, the
/// working directory first on `sys.path` — in a folder the user never trusted. Old code: both
/// planted copies ran. baton also says, once, that PATH has entries in the workspace.
#[test]
fn a_users_hook_runs_no_program_or_module_planted_in_the_workspace() {
    let Some(python) = external::require("python3", python()) else {
        return;
    };
    let env = Env::new();
    let outside = env.home.parent().expect("root").join("markers");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let (pwned, ran) = (outside.join("pwned"), outside.join("user-hook-ran"));
    let tools = env.home.join("tools");
    let ws_bin = env.workspace.join("bin");
    for (dir, marker, who) in [(&tools, &ran, "user"), (&env.workspace, &pwned, "planted")] {
        module(&dir.join("hookmod.py"), marker, &format!("{who} module"));
    }
    for (dir, marker, who) in [
        (tools.join("bin"), &ran, "user"),
        (ws_bin.clone(), &pwned, "planted"),
    ] {
        script(
            &dir.join("hooktool"),
            &format!("#!/bin/sh\necho '{who} tool' >> '{}'\n", marker.display()),
        );
    }
    let hooks = json!({"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": format!("hooktool; PYTHONPATH={} {} -m hookmod", q(tools.display().to_string()), q(python.display().to_string())), "timeout": 30}
    ]}]}});
    user_hooks(&env, &hooks);
    let engine = answering_ok();
    let out = env
        .exec(&engine, "hi", &["--json"])
        .env("PATH", path_with(&[&ws_bin, &tools.join("bin")]))
        .env("PY", &python)
        .env("PYTHONPATH", &tools)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        !pwned.exists(),
        "the hook ran what the workspace planted: {}",
        read(&pwned)
    );
    assert_eq!(read(&ran), "user tool\nuser module\n", "{stdout}");
    let warned = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .any(|e| {
            e["message"].as_str().is_some_and(|m| {
                m.contains("PATH has entries inside the workspace")
                    && m.contains(&ws_bin.display().to_string())
            })
        });
    assert!(warned, "no start-up warning about PATH: {stdout}");
}

/// Round 27 (high): hooks, MCP servers and the editor lost only a fixed list of loader
/// variables; `PYTHONUSERBASE` naming a folder of the workspace (direnv's layouts make such
/// variables) passed, and a `.pth` file a command wrote there ran in the user's hook, outside
/// the sandbox. Now any variable of baton's environment that names a path a command may write
/// is left out (baton's own and the places a hook needs aside), with a warning at start.
#[test]
fn a_users_hook_loads_nothing_a_variable_of_the_users_shell_names_in_the_workspace() {
    let Some(python) = external::require("python3", python()) else {
        return;
    };
    let env = Env::new();
    let outside = env.home.parent().expect("root").join("markers");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let (pwned, seen) = (outside.join("pwned"), outside.join("hook-env"));
    let version = std::process::Command::new(&python)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .expect("python version");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let user_base = env.workspace.join(".pyuser");
    let site = user_base.join(format!("lib/python{version}/site-packages"));
    std::fs::create_dir_all(&site).expect("mkdir");
    std::fs::write(
        site.join("zz_planted.pth"),
        format!(
            "import os; open({:?}, 'a').write('pth ran\\n')\n",
            pwned.display().to_string()
        ),
    )
    .expect("pth");
    let hooks = json!({"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": format!("env > {}; {} -c 'print(1)'", q(seen.display().to_string()), q(python.display().to_string())), "timeout": 30}
    ]}]}});
    user_hooks(&env, &hooks);
    let engine = answering_ok();
    let out = env
        .exec(&engine, "hi", &["--json"])
        .env("PY", &python)
        .env("PYTHONUSERBASE", &user_base)
        .env(
            "MYTOOL_PLUGINS",
            format!("--load={}", env.workspace.join("plugins").display()),
        )
        .env("BATON_NOTE_DIR", &env.workspace)
        // Round 29: a path glued to an option (ssh's `-Fpath`).
        .env(
            "GIT_SSH_COMMAND",
            format!("ssh -F{}", env.workspace.join(".ssh/config").display()),
        )
        // Round 28: glibc's loader splits at `;` too.
        .env(
            "LD_LIBRARY_PATH",
            format!("/usr/local/lib;{}", env.workspace.join(".libs").display()),
        )
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        !pwned.exists(),
        "the hook loaded what the workspace planted: {}",
        read(&pwned)
    );
    let hook_env = read(&seen);
    assert!(hook_env.contains("HOME="), "the hook did not run: {stdout}");
    for gone in [
        "PYTHONUSERBASE=",
        "MYTOOL_PLUGINS=",
        ".libs",
        "GIT_SSH_COMMAND=",
    ] {
        assert!(
            !hook_env.contains(gone),
            "{gone} reached the hook: {hook_env}"
        );
    }
    // Round 31: a hook gets a short list of variables and no other.
    assert!(!hook_env.contains("BATON_NOTE_DIR="), "{hook_env}");
    let warned = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "warning")
        .any(|e| {
            e["message"].as_str().is_some_and(|m| {
                m.contains("LD_LIBRARY_PATH, MYTOOL_PLUGINS, PYTHONUSERBASE name folders inside")
            })
        });
    assert!(warned, "no start-up warning about the variables: {stdout}");
}

/// Found beside round 27's 02: bubblewrap and the sandbox's helper start with the command's
/// environment, before any of its restrictions; a user's `LD_PRELOAD` (or `LD_LIBRARY_PATH`,
/// as a build folder's `lib` often is) naming the workspace loaded the library a command wrote
/// there into bubblewrap at the next command's start, outside the sandbox. They reach the
/// command alone now.
#[test]
fn a_library_a_command_writes_where_the_users_loader_variables_point_loads_only_inside() {
    if !baton::sandbox::probe().enforceable {
        return;
    }
    let Some(cc) = external::require("cc", on_path("cc")) else {
        return;
    };
    let env = Env::new();
    let outside = env.home.parent().expect("root").join("markers");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let marker = outside.join("loaded-in");
    let source = outside.join("evil.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void at_load(void) {{\n\
             char comm[64] = {{0}}; FILE *c = fopen(\"/proc/self/comm\", \"r\");\n\
             if (c) {{ fgets(comm, sizeof comm, c); fclose(c); }}\n\
             FILE *f = fopen({:?}, \"a\"); if (f) {{ fputs(comm, f); fclose(f); }} }}\n",
            marker.display().to_string()
        ),
    )
    .expect("source");
    let lib = env.workspace.join("lib");
    std::fs::create_dir_all(&lib).expect("mkdir");
    let built = Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(lib.join("evil.tmp"))
        .arg(&source)
        .output()
        .expect("cc");
    assert!(built.status.success(), "{built:?}");
    let call = |id: &str, command: &str| {
        crate::support::MockReply::tool_call(id, "shell", json!({"command": command}).to_string())
    };
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer("L2", call("c1", "mv lib/evil.tmp lib/evil.so"))
            .answer("L2", call("c2", "true"))
            .answer("L2", "done")
            .default_summary("s"),
    );
    let out = env
        .exec(&engine, "build", &["--json", "--approval", "full-auto"])
        .env("LD_PRELOAD", lib.join("evil.so"))
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("done"), "{stdout}");
    assert!(
        !marker.exists(),
        "a library the command wrote loaded outside the sandbox, in: {}",
        read(&marker)
    );
}

/// Round 33 (high): a user's server whose program lies in the workspace
/// (`~/proj/.venv/bin/python server.py`), or whose script does (`python3 ~/proj/server.py`),
/// ran what a command had rewritten there, outside the sandbox. Neither is started now; a
/// folder of the workspace given as data (the filesystem server's root) still is.
#[test]
fn a_users_server_whose_program_or_script_lies_in_the_workspace_is_not_started() {
    let Some(python) = external::require("python3", python()) else {
        return;
    };
    let env = Env::new();
    let outside = env.home.parent().expect("root").join("markers");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let pwned = outside.join("pwned");
    let venv_python = env.workspace.join(".venv/bin/python");
    std::fs::create_dir_all(venv_python.parent().expect("bin")).expect("mkdir");
    std::fs::write(
        &venv_python,
        format!("#!/bin/sh\necho program >> {}\n", pwned.display()),
    )
    .expect("write");
    std::fs::set_permissions(
        &venv_python,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    module(&env.workspace.join("server.py"), &pwned, "script");
    std::fs::write(
        env.workspace.join("run-server"),
        format!("echo run-server >> {}\n", pwned.display()),
    )
    .expect("write");
    std::fs::create_dir_all(env.workspace.join("srvdir")).expect("mkdir");
    module(&env.workspace.join("srvdir/__main__.py"), &pwned, "folder");
    let wrapper = outside.join("notify");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec {} {} \"$@\"\n",
            python.display(),
            env.workspace.join("server.py").display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    // `args` holding one file of the workspace.
    let one_arg = |name: &str| format!("[{}]", q(env.workspace.join(name).display().to_string()));
    for (command, args) in [
        (venv_python.display().to_string(), "[]".to_string()),
        (python.display().to_string(), one_arg("server.py")),
        // Round 34: a shell told to go there first.
        (
            "/bin/sh".to_string(),
            format!(
                "[\"-c\", {}]",
                q(format!(
                    "cd {} && exec ./.venv/bin/python",
                    env.workspace.display()
                ))
            ),
        ),
        // Round 36: a script with no extension, a folder, a launcher pointed at the
        // workspace, a wrapper outside it that runs a file of it.
        ("/bin/sh".to_string(), one_arg("run-server")),
        (python.display().to_string(), one_arg("srvdir")),
        (
            "/usr/bin/env".to_string(),
            format!(
                "[{}, \"/bin/sh\", \"run-server\"]",
                q(format!("--chdir={}", env.workspace.display()))
            ),
        ),
        (wrapper.display().to_string(), "[]".to_string()),
    ] {
        user_server(&env, &format!("command = {}\nargs = {args}\n", q(command)));
        let out = env.session_baton().arg("doctor").output().expect("doctor");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("folder commands may write"), "{text}");
        assert!(!pwned.exists(), "{}: {text}", read(&pwned));
    }
}

/// Round 34 (high): a user's server installed editable (`pip install -e ~/proj`: a `.pth` in
/// site-packages naming the project's `src`) imported what a command wrote there, outside the
/// sandbox. A Python whose site-packages (or the user's) load from a writable folder does not
/// start a server.
#[test]
fn a_users_python_server_installed_editable_from_the_workspace_is_not_started() {
    let Some(python) = external::require("python3", python()) else {
        return;
    };
    let env = Env::new();
    let outside = env.home.parent().expect("root").join("markers");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let pwned = outside.join("pwned");
    module(&env.workspace.join("src/mysrv.py"), &pwned, "planted");
    let version = Command::new(&python)
        .args([
            "-c",
            "import sys; print('python%d.%d' % sys.version_info[:2])",
        ])
        .output()
        .expect("python version");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let site = env
        .home
        .join(".local/lib")
        .join(version)
        .join("site-packages");
    std::fs::create_dir_all(&site).expect("mkdir");
    std::fs::write(
        site.join("__editable__.mysrv-0.1.pth"),
        format!("{}\n", env.workspace.join("src").display()),
    )
    .expect("pth");
    user_server(
        &env,
        &format!(
            "command = {}\nargs = [\"-m\", \"mysrv\"]\n",
            q(python.display().to_string())
        ),
    );
    let out = env.session_baton().arg("doctor").output().expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("editable install"), "{text}");
    assert!(!pwned.exists(), "{}: {text}", read(&pwned));
}

/// Round 35 (critical): a user's hook named its program by absolute path outside the
/// workspace, as hooks.md asks, but the path was a link into the project (`~/bin/hk ->
/// ~/proj/tools/hk`): the turn's own hook ran what the model's command wrote there. A hook
/// naming a path that leads into a writable folder is not run (a trusted folder's may be).
#[test]
fn a_users_hook_whose_program_links_into_the_workspace_is_not_run() {
    let env = Env::new();
    let outside = env.home.parent().expect("root").join("markers");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let pwned = outside.join("pwned");
    script(
        &env.workspace.join("tools/hk"),
        &format!("#!/bin/sh\necho planted >> '{}'\n", pwned.display()),
    );
    std::fs::create_dir_all(env.home.join("scripts")).expect("mkdir");
    std::os::unix::fs::symlink(env.workspace.join("tools/hk"), env.home.join("scripts/hk"))
        .expect("link");
    let hooks = json!({"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": env.home.join("scripts/hk").display().to_string(), "timeout": 30}
    ]}]}});
    user_hooks(&env, &hooks);
    let engine = answering_ok();
    let out = env.exec(&engine, "hi", &["--json"]).output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !pwned.exists(),
        "the hook ran the workspace's program: {stdout}"
    );
    // Round 37: baton's own hooks naming the workspace make it the user's configuration,
    // refused before any hook would run.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("folder commands may write") || stderr.contains("is your configuration"),
        "{stdout}{stderr}"
    );
}

/// Round 36 (high): the user's hook is a two-line wrapper outside the workspace that runs a
/// file of it (`exec sh ~/proj/tools/notify.sh`): a command rewrote that file and the same
/// turn's hook ran it. A program whose script text names a folder commands may write is not
/// run outside the sandbox; neither is a hook that names one on its own command line.
#[test]
fn a_users_hook_whose_wrapper_script_runs_a_workspace_file_is_not_run() {
    let env = Env::new();
    let outside = env.home.parent().expect("root").join("markers");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let pwned = outside.join("pwned");
    script(
        &env.workspace.join("tools/notify.sh"),
        &format!("#!/bin/sh\necho planted >> '{}'\n", pwned.display()),
    );
    let wrapper = outside.join("notify");
    script(
        &wrapper,
        &format!(
            "#!/bin/sh\nexec sh {} \"$@\"\n",
            env.workspace.join("tools/notify.sh").display()
        ),
    );
    // Round 37: a wrapper padded past what is read, a path quoted as the shell advises.
    let big = outside.join("big-notify");
    script(
        &big,
        &format!(
            "#!/bin/sh\n{}\nexec sh {} \"$@\"\n",
            "# padding\n".repeat(40_000),
            env.workspace.join("tools/notify.sh").display()
        ),
    );
    let quoted = match env.workspace.parent() {
        Some(parent) => format!(
            "sh \"{}\"/{}/tools/notify.sh",
            parent.display(),
            env.workspace.file_name().expect("name").to_string_lossy()
        ),
        None => String::new(),
    };
    // Round 38: named from the folder a hook starts in (the home).
    let relative = match env.workspace.strip_prefix(env.home.parent().expect("base")) {
        Ok(rel) => format!("sh ../{}/tools/notify.sh", rel.display()),
        Err(_) => String::new(),
    };
    for command in [
        wrapper.display().to_string(),
        format!("make -C {} notify", env.workspace.display()),
        big.display().to_string(),
        quoted,
        relative,
    ] {
        let hooks = json!({"hooks": {"UserPromptSubmit": [{"hooks": [
            {"type": "command", "command": command, "timeout": 30}
        ]}]}});
        user_hooks(&env, &hooks);
        let engine = answering_ok();
        let out = env.exec(&engine, "hi", &["--json"]).output().expect("run");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !pwned.exists(),
            "the hook ran the workspace's file: {stdout}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stdout.contains("folder commands may write")
                || stdout.contains("too long to check")
                || stderr.contains("is your configuration"),
            "{command}: {stdout}{stderr}"
        );
    }
}
