//! The work-tree files a hook manager installed in a repository's hooks obeys at each commit
//! (pre-commit, lefthook, overcommit, lint-staged behind husky): what they list runs outside
//! the sandbox at the user's next `git commit`, so they are guarded like the hooks themselves.

use std::path::{Path, PathBuf};

use super::gitdirs::read_small;

/// Extensions lefthook reads its configuration with, in its order.
const LEFTHOOK_EXTENSIONS: &[&str] = &["yml", "yaml", "toml", "json", "jsonc"];

/// Names lefthook looks for (each with every extension above), its own and the local ones it
/// merges over them.
const LEFTHOOK_NAMES: &[&str] = &[
    "lefthook",
    ".lefthook",
    ".config/lefthook",
    "lefthook-local",
    ".lefthook-local",
    ".config/lefthook-local",
];

/// lint-staged's configuration files (its `package.json` key is not among them: see
/// docs/sandbox.md).
const LINT_STAGED_FILES: &[&str] = &[
    ".lintstagedrc",
    ".lintstagedrc.json",
    ".lintstagedrc.yaml",
    ".lintstagedrc.yml",
    ".lintstagedrc.mjs",
    ".lintstagedrc.cjs",
    ".lintstagedrc.js",
    "lint-staged.config.js",
    "lint-staged.config.mjs",
    "lint-staged.config.cjs",
];

/// pre-commit's configuration names; prek (its rewrite) also runs one in any folder below the
/// top of the work tree, for the files staged beneath it.
pub(super) const PRE_COMMIT_CONFIGS: &[&str] =
    &[".pre-commit-config.yaml", ".pre-commit-config.yml"];

/// Scripts read at most per hooks folder: a manager's hook is one of git's few hook names.
const MAX_HOOKS_READ: usize = 64;

/// What the hooks in `hooks_dirs` make of `work_tree`, each script read once.
pub(super) struct Managed {
    /// The files and folders, existing or not, that a manager whose hook lies there runs
    /// commands from. A hook that names no manager adds nothing.
    pub(super) obeyed: Vec<PathBuf>,
    /// The programs the hooks name by a path in the work tree (a manager installed in the
    /// project's `.venv`: prek, pre-commit's Python): guarded like a hook.
    pub(super) programs: Vec<PathBuf>,
    /// Folders the hooks' PATH searches before the system's (husky's `node_modules/.bin`):
    /// an entry there named like a program of the system shadows it for every hook.
    pub(super) shadowing: Vec<PathBuf>,
    /// How the hooks start programs from inside the work tree, where commands may change
    /// them (the above, and npm-installed managers run from `node_modules`): what can only be
    /// told.
    pub(super) told: Vec<String>,
}

pub(super) fn managed(hooks_dirs: &[PathBuf], work_tree: &Path) -> Managed {
    let scripts: Vec<(&PathBuf, Vec<String>)> = hooks_dirs
        .iter()
        .map(|dir| (dir, hook_scripts(dir)))
        .collect();
    let mut found = Managed {
        obeyed: obeyed_files(&scripts, work_tree),
        programs: Vec::new(),
        shadowing: Vec::new(),
        told: Vec::new(),
    };
    runs_from_work_tree(&scripts, work_tree, &mut found);
    found
}

fn obeyed_files(scripts: &[(&PathBuf, Vec<String>)], work_tree: &Path) -> Vec<PathBuf> {
    let mut names: Vec<String> = Vec::new();
    for script in scripts.iter().flat_map(|(_, s)| s) {
        names_for(script, &mut names);
    }
    let mut out: Vec<PathBuf> = Vec::new();
    let add = |name: &str, out: &mut Vec<PathBuf>| {
        let p = crate::untrusted_fs::lexical(&work_tree.join(name));
        // A setting pointing out of the work tree is the user's own file, not the project's.
        if p.starts_with(work_tree) && !out.contains(&p) {
            out.push(p);
        }
    };
    for name in &names {
        add(name, &mut out);
    }
    // What lefthook's configurations pull in obeys the same rule, one level deep as lefthook
    // itself reads them.
    let configs: Vec<PathBuf> = out
        .iter()
        .filter(|p| is_lefthook_config(p))
        .cloned()
        .collect();
    for config in configs {
        if let Some(text) = read_small(&config) {
            for name in lefthook_includes(&String::from_utf8_lossy(&text)) {
                add(&name, &mut out);
            }
        }
    }
    out
}

/// Whether `path` is named as one of lefthook's configurations.
fn is_lefthook_config(path: &Path) -> bool {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy()) else {
        return false;
    };
    LEFTHOOK_NAMES.iter().any(|n| {
        let n = n.rsplit('/').next().unwrap_or(n);
        name.strip_prefix(n)
            .and_then(|ext| ext.strip_prefix('.'))
            .is_some_and(|ext| LEFTHOOK_EXTENSIONS.contains(&ext))
    })
}

/// Configurations a manager also takes from any folder below the top of the work tree, for
/// the files staged beneath it: prek's pre-commit configurations and lint-staged's (the
/// nearest one to each file wins).
pub fn applies_below_the_top(path: &Path) -> bool {
    path.file_name().is_some_and(|n| {
        PRE_COMMIT_CONFIGS
            .iter()
            .chain(LINT_STAGED_FILES)
            .any(|c| n == *c)
    })
}

/// Whether `path` (absolute, resolved) is, or lies in, what a hook manager installed in the
/// repository around it obeys: the file tools' answer, for the work tree of the workspace and
/// of nested repositories alike (the launcher pins only the workspace's). Only names a manager
/// reads are looked into; the nearest work tree above decides.
pub(super) fn guards(path: &Path, writable: &[PathBuf]) -> bool {
    let named = path.iter().any(|part| {
        let part = part.to_string_lossy();
        PRE_COMMIT_CONFIGS.contains(&part.as_ref())
            || LINT_STAGED_FILES.contains(&part.as_ref())
            || [
                ".overcommit.yml",
                ".git-hooks",
                ".lefthook",
                ".lefthook-local",
            ]
            .contains(&part.as_ref())
            || is_lefthook_config(Path::new(part.as_ref()))
    });
    // Only a manager's own names are looked into here (a file tool's check must stay cheap);
    // what the workspace's managers name besides (`extends:`, `--config`) the launcher's
    // protection refuses by path.
    if !named {
        return false;
    }
    let Some(top) = path
        .ancestors()
        .skip(1)
        .take_while(|a| super::roots::inside_any(a, writable))
        .find(|a| std::fs::symlink_metadata(a.join(".git")).is_ok())
    else {
        return false;
    };
    let Some(gitdir) = super::gitdirs::gitdir_of(&top.join(".git")) else {
        return false;
    };
    let configs = super::gitdirs::GitConfigs::read(&gitdir);
    let obeyed = managed(&super::gitdirs::hooks_dirs(&gitdir, &configs, top), top).obeyed;
    obeyed.iter().any(|o| path.starts_with(o))
        || (applies_below_the_top(path) && obeyed.iter().any(|o| o.file_name() == path.file_name()))
}

/// Fills `found`'s programs, shadowing folders and what is told from the hooks' scripts.
fn runs_from_work_tree(scripts: &[(&PathBuf, Vec<String>)], work_tree: &Path, found: &mut Managed) {
    for (dir, scripts) in scripts {
        if scripts.is_empty() {
            continue;
        }
        if dir.ends_with(".husky/_") || dir.ends_with(".husky") {
            found
                .told
                .push("husky's hooks put node_modules/.bin first on their PATH".into());
            // The folder as husky's shell names it and where it really is: a command can make
            // `node_modules` or `.bin` a link to a folder it writes (`tools/`), and a program
            // named `sh` there is the one every hook starts.
            let bin = work_tree.join("node_modules/.bin");
            let real = bin.canonicalize().ok().filter(|r| *r != bin);
            for folder in std::iter::once(bin).chain(real) {
                if !found.shadowing.contains(&folder) {
                    found.shadowing.push(folder);
                }
            }
        }
        for script in scripts {
            for word in script.split(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | '=' | '(' | ')' | ';' | ':')
            }) {
                if word.starts_with('/') {
                    let p = crate::untrusted_fs::lexical(Path::new(word));
                    // A folder (`cd /ws/sub`) is where the hook works, not what it runs.
                    if p.starts_with(work_tree) && !p.is_dir() {
                        found.programs.push(p);
                    }
                } else if word.contains("node_modules/") && word != "node_modules/.bin" {
                    found.told.push(format!("they run {word}"));
                }
            }
        }
    }
    // Made unique once: a hook naming thousands of paths must not cost their square.
    drop_repeats(&mut found.programs);
    found.told.extend(
        found
            .programs
            .iter()
            .map(|p| format!("they run {}", p.display())),
    );
    drop_repeats(&mut found.told);
}

/// Keeps the first of each item, in order.
pub(super) fn drop_repeats<T: Clone + Eq + std::hash::Hash>(list: &mut Vec<T>) {
    let mut seen = std::collections::HashSet::new();
    list.retain(|item| seen.insert(item.clone()));
}

/// The contents of the scripts directly in `dir` (samples aside), as text.
fn hook_scripts(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".sample"))
        .take(MAX_HOOKS_READ)
        .filter_map(|e| read_small(&e.path()))
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .collect()
}

/// What the manager that wrote `script` reads, relative to the work tree.
fn names_for(script: &str, out: &mut Vec<String>) {
    let mut add = |name: &str| {
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    };
    // pre-commit's and prek's hooks hand their arguments to `hook-impl`.
    if script.contains("hook-impl") && (script.contains("pre-commit") || script.contains("prek")) {
        for name in PRE_COMMIT_CONFIGS {
            add(name);
        }
        for config in config_flags(script) {
            add(&config);
        }
    }
    if script.contains("lefthook") {
        for name in LEFTHOOK_NAMES {
            for ext in LEFTHOOK_EXTENSIONS {
                add(&format!("{name}.{ext}"));
            }
        }
        // Where lefthook's `scripts:` entries live.
        add(".lefthook");
        add(".lefthook-local");
    }
    if script.contains("overcommit") {
        add(".overcommit.yml");
        // overcommit's own hook plugins.
        add(".git-hooks");
    }
    if script.contains("lint-staged") {
        for name in LINT_STAGED_FILES {
            add(name);
        }
        for config in config_flags(script) {
            add(&config);
        }
    }
}

/// The `--config=FILE` / `--config FILE` values in a hook's arguments (pre-commit's, prek's,
/// lint-staged's), and lint-staged's `-c FILE`.
fn config_flags(script: &str) -> Vec<String> {
    let words: Vec<&str> = script
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '"' | '\'' | ';' | '&' | '|'))
        .filter(|w| !w.is_empty())
        .collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let after_lint_staged = i > 0 && words[i - 1].ends_with("lint-staged");
        let value = match w.strip_prefix("--config=") {
            Some(v) => Some(v),
            None if *w == "--config" || (*w == "-c" && after_lint_staged) => {
                words.get(i + 1).copied()
            }
            None => None,
        };
        if let Some(v) = value.filter(|v| !v.is_empty() && !v.starts_with('$')) {
            out.push(v.to_string());
        }
    }
    out
}

/// The files a lefthook configuration pulls in (`extends:`) and the folders its scripts are
/// taken from (`source_dir:`, `source_dir_local:`), as written: a YAML list under the key, or
/// one value or a bracketed list on its line (YAML, TOML and JSON alike).
fn lefthook_includes(config: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_list = false;
    for line in config.lines() {
        let trimmed = line.trim();
        if in_list {
            if let Some(item) = trimmed.strip_prefix("- ") {
                out.push(unquote(item).to_string());
                continue;
            }
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            in_list = false;
        }
        let unquoted_key = trimmed.trim_start_matches(['{', ' ', '"']);
        let Some(key) = ["extends", "source_dir_local", "source_dir"]
            .into_iter()
            .find(|k| unquoted_key.starts_with(k))
        else {
            continue;
        };
        let rest = unquoted_key[key.len()..]
            .trim_start_matches('"')
            .trim_start()
            .trim_start_matches([':', '='])
            .trim();
        if rest.is_empty() {
            in_list = true;
            continue;
        }
        let items = match rest.strip_prefix('[') {
            Some(list) => list.split(']').next().unwrap_or(""),
            None => rest.trim_end_matches([',', '}']),
        };
        out.extend(
            items
                .split(',')
                .map(unquote)
                .filter(|v| !v.is_empty())
                .map(str::to_string),
        );
    }
    out
}

fn unquote(v: &str) -> &str {
    v.trim().trim_matches(|c| c == '"' || c == '\'')
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sandbox::git_guard::ws;

    const PRE_COMMIT_HOOK: &str = "#!/usr/bin/env bash\n# File generated by pre-commit: https://pre-commit.com\nINSTALL_PYTHON=/usr/bin/python3\nARGS=(hook-impl --config=ci/pre-commit.yaml --hook-type=pre-commit)\nexec \"$INSTALL_PYTHON\" -mpre_commit \"${ARGS[@]}\"\n";

    #[test]
    fn each_managers_hook_names_what_it_obeys() {
        let (_d, ws) = ws();
        let hooks = ws.join(".git/hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        std::fs::write(hooks.join("pre-commit"), PRE_COMMIT_HOOK).unwrap();
        std::fs::write(hooks.join("pre-push.sample"), "lefthook overcommit").unwrap();
        let got = managed(std::slice::from_ref(&hooks), &ws).obeyed;
        assert_eq!(
            got,
            vec![
                ws.join(".pre-commit-config.yaml"),
                ws.join(".pre-commit-config.yml"),
                ws.join("ci/pre-commit.yaml")
            ]
        );

        std::fs::write(
            hooks.join("commit-msg"),
            "#!/bin/sh\ncall_lefthook run \"commit-msg\" \"$@\"\n",
        )
        .unwrap();
        let got = managed(std::slice::from_ref(&hooks), &ws).obeyed;
        for want in [
            "lefthook.yml",
            "lefthook-local.toml",
            ".config/lefthook.json",
            ".lefthook",
        ] {
            assert!(got.contains(&ws.join(want)), "{want}: {got:?}");
        }
        assert!(!got.contains(&ws.join(".overcommit.yml")));
    }

    #[test]
    fn lefthook_includes_and_lint_staged_configs_are_read_in_every_form() {
        let yaml = "extends:\n  - config/base.yml\n  - \"shared/x.yml\"\n\npre-commit:\n  jobs: []\nsource_dir: \".hooks/\"\n";
        assert_eq!(
            lefthook_includes(yaml),
            ["config/base.yml", "shared/x.yml", ".hooks/"]
        );
        assert_eq!(
            lefthook_includes("extends = [\"a.toml\", 'b.toml']\n"),
            ["a.toml", "b.toml"]
        );
        assert_eq!(lefthook_includes("{\"extends\": [\"c.json\"]}"), ["c.json"]);
        assert_eq!(
            config_flags("npx lint-staged -c tools/ls.json && sh -c x"),
            ["tools/ls.json"]
        );
        assert_eq!(
            config_flags("lint-staged --config=ci/ls.mjs"),
            ["ci/ls.mjs"]
        );
    }

    #[test]
    fn a_hook_that_runs_a_program_of_the_work_tree_is_found() {
        let (_d, ws) = ws();
        let hooks = ws.join(".git/hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        let w = ws.display();
        std::fs::write(
            hooks.join("pre-commit"),
            format!("#!/bin/sh\ncd {w}/sub\nPREK=\"{w}/.venv/bin/prek\"\nexec \"$PREK\"\n"),
        )
        .unwrap();
        std::fs::write(hooks.join("pre-push"), "#!/bin/sh\n/usr/bin/true\n").unwrap();
        let found = managed(std::slice::from_ref(&hooks), &ws);
        assert_eq!(found.programs, vec![ws.join(".venv/bin/prek")]);
        assert_eq!(found.told.len(), 1, "{:?}", found.told);
    }

    #[test]
    fn husky_scripts_running_lint_staged_protect_its_files_and_a_config_outside_is_ignored() {
        let (_d, ws) = ws();
        let husky = ws.join(".husky");
        std::fs::create_dir_all(&husky).unwrap();
        std::fs::write(husky.join("pre-commit"), "npx lint-staged\n").unwrap();
        let got = managed(std::slice::from_ref(&husky), &ws).obeyed;
        assert!(got.contains(&ws.join(".lintstagedrc.json")), "{got:?}");

        let outside = "ARGS=(hook-impl --config ../../etc/x.yaml)\npre-commit";
        let hooks = ws.join("hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        std::fs::write(hooks.join("pre-commit"), outside).unwrap();
        let got = managed(&[hooks], &ws).obeyed;
        assert_eq!(
            got,
            vec![
                ws.join(".pre-commit-config.yaml"),
                ws.join(".pre-commit-config.yml")
            ]
        );
    }
}
