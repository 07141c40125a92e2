//! Every `--flag` the user docs (README.md, docs/*.md) name is a real flag of the command it is
//! written for: the root command, or the subcommand named before it on the same line (or the
//! one the page is about). Checked against the clap definitions, and root flags by parsing
//! them for real; every config key is a root flag too, as docs/configuration.md promises.

use baton::cli::Cli;
use baton::config::defs;
use clap::CommandFactory;

/// Flags of other programs that the docs quote (cargo, vLLM / SGLang, git, the PyTorch bench
/// script): not baton's to define.
const FOREIGN: &[&str] = &[
    // cargo
    "--release",
    "--bin",
    "--bench",
    "--test",
    "--lib",
    "--all-targets",
    "--locked",
    "--no-run",
    "--nocapture",
    "--ignored",
    "--target",
    // cargo and git in the hook examples (hooks.md)
    "--quiet",
    "--show-current",
    // podman and docker (eval.md's container runtimes), and a Dockerfile's `RUN --mount`
    "--filter",
    "--network",
    "--mount",
    // launchers pointed at a folder (mcp.md), git's credential store (sandbox.md)
    "--prefix",
    "--chdir",
    "--directory",
    "--file",
    // vLLM / SGLang serving the adapters
    "--lora-modules",
    "--lora-paths",
    "--enable-lora",
    "--max-lora-rank",
    "--max-loras",
    "--port",
    "--enable-prefix-caching",
    "--max-model-len",
    "--reasoning-parser",
    "--tool-call-parser",
    "--enable-auto-tool-choice",
    "--host",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--max-cudagraph-capture-size",
    "--max-cpu-loras",
    "--enable-prompt-tokens-details",
    "--no-async-scheduling",
    "--attention-backend",
    "--model-path",
    "--tp",
    "--context-length",
    "--mem-fraction-static",
    "--max-loaded-loras",
    "--max-loras-per-batch",
    "--lora-use-virtual-experts",
    "--disable-overlap-schedule",
    "--disable-cuda-graph",
    // tools/bench/serve_vs_harness.py (serve.md, "Against the reference harness")
    "--harness",
    "--baton",
    "--baton-args",
    "--harness-python",
    "--experts",
    "--think",
    "--rates",
    "--step-seconds",
    "--conversations",
    "--turns",
    "--concurrent",
    "--skip-concurrent",
    "--only",
    "--keep-logs",
    // cargo install, Python's bench script, Harbor, ripgrep and git (sandbox.md)
    "--path",
    "--root",
    "--repeats",
    "--moe",
    "--weights",
    "--delta-rule",
    "--steps",
    // tools/bench/sandbox_cli.py (sandbox.md, "Benchmark")
    "--files",
    // the engine benchmark binary (engine.md)
    "--prefill",
    "--decode",
    // tools/make_tiny_model.py (the engine fixtures)
    "--variant",
    "--agent-import-path",
    // Harbor's `harbor run` (harbor.md); `--agent` is also `baton eval`'s
    "--agent",
    "--ak",
    "--ae",
    "--retry-include",
    "--jobs-dir",
    "--pre",
    "--output",
    "--ext-diff",
    // git commit's, which the audit's word on hooks that run the work tree names (sandbox.md)
    "--no-verify",
    // git rebase, which the audit's warning about a planted todo list names (sandbox.md)
    "--abort",
    // the options the approval safe list refuses or allows (sandbox.md, "Approvals")
    "--compress-prog",
    "--compress-program",
    "--config",
    "--config-env",
    "--exec-path",
    "--filters",
    "--git-dir",
    "--hostname-bin",
    "--no-index",
    "--no-pager",
    "--open-files-in-pager",
    "--paginate",
    "--pre-glob",
    "--receive-pack",
    "--rfc-3339",
    "--set",
    "--textconv",
    "--upload-pack",
    "--work-tree",
    // node's option naming a file it loads (mcp.md, "A project's servers")
    "--require",
    // pip, update-alternatives and tar options a task's Dockerfile uses (eval.md)
    "--install",
    "--retries",
    "--index-url",
    "--extra-index-url",
    "--trusted-host",
    "--target",
    "--no-same-owner",
    // bubblewrap's command line (sandbox.md)
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-net",
    "--new-session",
    "--die-with-parent",
    "--disable-userns",
    "--cap-drop",
    "--ro-bind",
    "--ro-bind-fd",
    "--bind-fd",
    "--bind",
    "--tmpfs",
    "--perms",
    "--size",
    "--dev",
    "--proc",
    "--remount-ro",
];

/// The subcommand a page is about: its flags may be written without `baton <sub>` on the line.
fn page_subcommand(file: &str) -> Option<&'static str> {
    match file {
        "eval.md" => Some("eval"),
        "engine-cli.md" => Some("engine"),
        "sandbox.md" => Some("sandbox"),
        "serve.md" => Some("serve"),
        _ => None,
    }
}

/// `--name` tokens of a line with their byte offsets (not `---` rules, not a bare `--`).
fn flags_in(line: &str) -> Vec<(usize, String)> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < bytes.len() {
        let starts = bytes[i] == b'-'
            && bytes[i + 1] == b'-'
            && bytes[i + 2].is_ascii_lowercase()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'-'));
        if !starts {
            i += 1;
            continue;
        }
        let mut end = i + 2;
        while end < bytes.len()
            && (bytes[end].is_ascii_lowercase()
                || bytes[end].is_ascii_digit()
                || bytes[end] == b'-')
        {
            end += 1;
        }
        out.push((i, line[i..end].trim_end_matches('-').to_string()));
        i = end;
    }
    out
}

/// The subcommand paths written on a line (`baton eval …`, `baton --local R engine route …`;
/// a line may show more than one command), each with the byte offset where its name ends.
fn subcommands_in(line: &str, root: &clap::Command) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for (start, _) in line.match_indices("baton ") {
        let mut cmd = root;
        let mut path = Vec::new();
        let mut offset = start + "baton ".len();
        for word in line[offset..].split_inclusive(|c: char| c.is_whitespace() || c == '`') {
            let name = word.trim_end_matches(|c: char| c.is_whitespace() || c == '`');
            offset += word.len();
            if name.starts_with('-') || name.is_empty() {
                continue;
            }
            match cmd.find_subcommand(name) {
                Some(sub) => {
                    path.push(name.to_string());
                    out.push((offset, path.clone()));
                    cmd = sub;
                }
                // A value of a flag (`--local ROOT`) may come before the subcommand.
                None if path.is_empty() => continue,
                None => break,
            }
        }
        if path.is_empty() {
            // A plain `baton …` after a subcommand on the same line is the root again.
            out.push((start + "baton ".len(), Vec::new()));
        }
    }
    out
}

fn command_at<'a>(root: &'a clap::Command, path: &[String]) -> Option<&'a clap::Command> {
    let mut cmd = root;
    for name in path {
        cmd = cmd.find_subcommand(name)?;
    }
    Some(cmd)
}

fn is_flag(arg: &clap::Arg, flag: &str) -> bool {
    let name = &flag[2..];
    arg.get_long() == Some(name) || arg.get_all_aliases().is_some_and(|al| al.contains(&name))
}

fn defines(cmd: &clap::Command, flag: &str) -> bool {
    cmd.get_arguments().any(|a| is_flag(a, flag))
}

/// Defined on `cmd` or on any subcommand below it (a page about `engine` documents
/// `engine generate` and `engine route`).
fn defines_below(cmd: &clap::Command, flag: &str) -> bool {
    defines(cmd, flag) || cmd.get_subcommands().any(|s| defines_below(s, flag))
}

/// Parses a root flag for real, with a value when it takes one.
fn root_parses(root: &clap::Command, flag: &str) -> Result<(), String> {
    let arg = root
        .get_arguments()
        .find(|a| is_flag(a, flag))
        .ok_or_else(|| format!("{flag} is not defined"))?;
    let mut argv = vec!["baton".to_string()];
    // Some headless flags require --exec.
    if flag != "--exec" {
        argv.push("--exec".into());
    }
    argv.push(flag.to_string());
    if arg.get_action().takes_values() {
        let named = arg
            .get_value_names()
            .and_then(|n| n.first())
            .map(|n| n.as_str());
        let value = match (arg.get_possible_values().first(), named) {
            (Some(v), _) => v.get_name().to_string(),
            (None, Some("LABEL")) => "L2".into(),
            (None, Some("URL")) => "http://127.0.0.1:9/v1".into(),
            _ => "1".into(),
        };
        argv.push(value);
    }
    match root.clone().try_get_matches_from(&argv) {
        Ok(_) => Ok(()),
        // `--version` and `--help` parse by printing and stopping.
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayVersion | clap::error::ErrorKind::DisplayHelp
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(format!("{}: {e}", argv.join(" "))),
    }
}

fn doc_files() -> Vec<(String, String)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files = vec![(
        "README.md".to_string(),
        std::fs::read_to_string(format!("{root}/README.md")).unwrap(),
    )];
    let mut docs: Vec<_> = std::fs::read_dir(format!("{root}/docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    for p in docs {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        files.push((name, std::fs::read_to_string(&p).unwrap()));
    }
    files
}

#[test]
fn every_flag_the_docs_name_is_a_real_flag() {
    let mut root = Cli::command();
    root.build();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, text) in doc_files() {
        for (n, line) in text.lines().enumerate() {
            let subs = subcommands_in(line, &root);
            for (at, flag) in flags_in(line) {
                if FOREIGN.contains(&flag.as_str()) {
                    continue;
                }
                checked += 1;
                let path = subs
                    .iter()
                    .rev()
                    .find(|(end, _)| *end <= at)
                    .map(|(_, p)| p.clone())
                    .unwrap_or_default();
                let ok = if path.is_empty() {
                    root_parses(&root, &flag).is_ok()
                        || page_subcommand(&file)
                            .and_then(|s| root.find_subcommand(s))
                            .is_some_and(|s| defines_below(s, &flag))
                } else {
                    command_at(&root, &path).is_some_and(|c| defines(c, &flag))
                };
                if !ok {
                    let on = if path.is_empty() {
                        "baton".to_string()
                    } else {
                        format!("baton {}", path.join(" "))
                    };
                    problems.push(format!("{file}:{}: {flag} is not a flag of `{on}`", n + 1));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} flags found: is the scan broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_flags_the_docs_promised_parse_with_their_values() {
    let root = Cli::command();
    let argv = [
        "baton",
        "--network",
        "--write",
        "/tmp/a",
        "--write",
        "/tmp/b",
        "--ask-for-approval",
        "full-auto",
        "--max-tokens",
        "64",
        "--temperature",
        "0.2",
        "--top-p",
        "0.9",
        "--seed",
        "7",
        "--tools",
        "read_file,list_dir",
        "--compact-at",
        "80%",
        "--exec",
        "x",
    ];
    root.try_get_matches_from(argv).unwrap();
}

#[test]
fn every_setting_is_a_flag_of_the_commands_its_definition_names() {
    let mut root = Cli::command();
    root.build();
    let serve = root.find_subcommand("serve").expect("baton serve").clone();
    let doctor = root
        .find_subcommand("doctor")
        .expect("baton doctor")
        .clone();
    let mut missing = Vec::new();
    for def in defs::DEFS {
        let Some(flag) = def.flag else {
            missing.push(format!("{}: no flag", def.key));
            continue;
        };
        let long = format!("--{}", flag.long);
        let mut on = vec![("baton", &root)];
        if flag.serve {
            on.push(("baton serve", &serve));
        }
        if flag.global {
            on.push(("baton doctor", &doctor));
        }
        for (name, cmd) in on {
            if !defines(cmd, &long) {
                missing.push(format!("{name} {long} ({})", def.key));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "settings without their flag: {missing:?}"
    );
    // A setting flag given to `baton serve` is parsed by the config parser, as at the root.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--follow-ups", "sometimes"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("sometimes") && err.contains("sticky"), "{err}");
}

#[test]
fn the_keys_table_in_the_docs_is_the_settings_definitions() {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
    )
    .unwrap();
    let start = docs
        .find("| key | values | default | meaning |")
        .expect("the keys table");
    let table: String = docs[start..]
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    let want = defs::docs_table();
    if table != want {
        let diff: Vec<String> = want
            .lines()
            .zip(table.lines().chain(std::iter::repeat("(missing)")))
            .filter(|(w, t)| w != t)
            .map(|(w, t)| format!("docs:  {t}\nwants: {w}"))
            .collect();
        panic!(
            "docs/configuration.md's keys table is not the definitions' (config::defs::docs_table):\n{}",
            diff.join("\n")
        );
    }
    // The trust table names every guarded key, and no other.
    let trust_start = docs
        .find("| key | an untrusted project file may set it to… |")
        .expect("the trust table");
    let trust_rows: String = docs[trust_start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .collect();
    let named = |key: &str| {
        trust_rows.contains(&format!("`{key}`"))
            || def_section(key).is_some_and(|(s, n)| trust_rows.contains(&format!("`[{s}] {n}`")))
    };
    for def in defs::DEFS {
        // `l0_tools` … `l3_tools`: the row names the first and the last of the four.
        let family = def
            .key
            .strip_prefix(['l'])
            .and_then(|rest| rest.get(1..))
            .filter(|rest| rest.starts_with('_'))
            .is_some_and(|rest| trust_rows.contains(&format!("`l3{rest}`")));
        assert_eq!(
            named(def.key) || family,
            def.guarded,
            "`{}` is {}guarded but the trust table {} it",
            def.key,
            if def.guarded { "" } else { "not " },
            if def.guarded {
                "does not name"
            } else {
                "names"
            }
        );
    }
}

fn def_section(key: &str) -> Option<(&'static str, &'static str)> {
    defs::find(key).and_then(|d| d.section)
}

#[test]
fn the_scanner_finds_flags_and_subcommands() {
    let mut root = Cli::command();
    root.build();
    let line = "baton --local ROOT engine route --raw `--x-y` a--b ---";
    let flags: Vec<String> = flags_in(line).into_iter().map(|(_, f)| f).collect();
    assert_eq!(flags, ["--local", "--raw", "--x-y"]);
    let subs = subcommands_in(line, &root);
    assert_eq!(subs.last().unwrap().1, ["engine", "route"]);
}
