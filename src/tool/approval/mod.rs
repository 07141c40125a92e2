//! Approval decisions: given the policy, what a call needs, and the command prefixes the user
//! allowed (config) or approved this session, say Allow, Ask or Decline. Commands are judged on
//! their parsed words, never on raw text: tree-sitter-bash finds every simple command a line
//! would run (`parse`), and the line is auto-approved only when each of them is on the
//! read-only safe list (`safe`) or starts with an allowed prefix word for word, and nothing
//! writes through a redirection. Input typed into a running session is judged by what reads
//! it (`input`).

mod input;
mod parse;
mod safe;

pub use input::{SessionInput, judge_session_input};

use crate::tool::ApprovalNeed;

use crate::protocol::ApprovalPolicy;

/// The outcome for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Ask,
    Decline(String),
}

/// Programs whose arguments may be code (`-c`, `-e`, `--eval`, `-ex`) or that read a script:
/// "don't ask again" remembers the script with them, never the bare program.
const INTERPRETERS: &[&str] = &[
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "ipython",
    "node",
    "nodejs",
    "deno",
    "bun",
    "ruby",
    "irb",
    "perl",
    "php",
    "lua",
    "luajit",
    "Rscript",
    "R",
    "julia",
    "tclsh",
    "wish",
    "expect",
    "osascript",
    "pwsh",
    "powershell",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "bash",
    "sh",
    "zsh",
    "dash",
    "ksh",
    "mksh",
    "fish",
    "csh",
    "tcsh",
    "ash",
    "busybox",
    "java",
    "jshell",
    "groovy",
    "scala",
    "kotlin",
    "elixir",
    "iex",
    "erl",
    "escript",
    "guile",
    "racket",
    "sbcl",
    "ghci",
    "runghc",
    "swift",
    "vim",
    "vi",
    "nvim",
    "emacs",
    "gdb",
    "lldb",
    "sqlite3",
    "psql",
    "mysql",
];

/// `python3.12`, `/usr/bin/ruby3.2`: the interpreter's name with its version.
fn is_interpreter(name: &str) -> bool {
    let bare = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS.contains(&name) || INTERPRETERS.contains(&bare)
}

/// The argv prefix offered for "yes, don't ask again" on a command — exactly what the user is
/// shown (as `PREFIX …`) and what is remembered: a later command is approved when its first
/// words are these words, literally. The program plus its subcommand for tools that have them
/// (`cargo test`, `git commit`, `python3 -m pytest`), a runner with what it runs (`npm run
/// build`, `uv run pytest`), an interpreter with its script (`python3 build.py`, `uv run
/// python build.py`), else the program. `None` where no prefix is narrow enough: a compound
/// command (`cd x && rm -rf y`), a redirection, a word the shell decides (`$x`, `*`), an
/// interpreter running inline code (`python3 -c …`), a wrapper (`sudo`, `env`, `xargs`).
pub fn remember_prefix(command: &str, argv: &[String]) -> Option<Vec<String>> {
    // A control character is not shown as it is (the prompt spells it out): a prefix
    // holding one would not be what the user read.
    if ["&&", "||", ";", "|", "`", "$(", ">", "<", "\n", "&"]
        .iter()
        .any(|op| command.contains(op))
        || command.chars().any(char::is_control)
    {
        return None;
    }
    let parsed = match parse::simple_commands(command) {
        Some(cmds) => match cmds.as_slice() {
            [one] => one.literal_argv()?,
            _ => return None,
        },
        // Not a shell line (a tool's own argv, as the git tool's commit).
        None if !argv.is_empty()
            && shlex::try_join(argv.iter().map(String::as_str)).ok()? == command =>
        {
            argv.to_vec()
        }
        None => return None,
    };
    let argv = &parsed[..];
    let program = argv.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    // A wrapper runs the command in its arguments: remembering `sudo` (or `env`, `xargs`)
    // would approve every command behind it, none of which the user was shown.
    if WRAPPERS.contains(&name) {
        return None;
    }
    let arg = |i: usize| argv.get(i).map(String::as_str);
    // Where the program a runner starts sits (`npm run NAME`, `npx NAME`).
    let runs_at = match name {
        _ if RUNNERS
            .iter()
            .any(|(tool, sub)| *tool == name && arg(1) == Some(*sub)) =>
        {
            Some(2)
        }
        "npx" | "bunx" => Some(1),
        _ => None,
    };
    if let Some(at) = runs_at
        && let Some(target) = arg(at)
    {
        let target = target.rsplit('/').next().unwrap_or(target);
        if WRAPPERS.contains(&target) {
            return None;
        }
        // `uv run python …` is an interpreter too: remembered with its script only.
        if is_interpreter(target) {
            return match arg(at + 1) {
                Some(script) if !script.starts_with('-') => Some(argv[..at + 2].to_vec()),
                _ => None,
            };
        }
    }
    let words = match name {
        _ if name.starts_with("python") && arg(1) == Some("-m") => 3,
        _ if runs_at == Some(2) => 3,
        _ if is_interpreter(name) => {
            // The script, by name; inline code or flags first remember nothing.
            return match arg(1) {
                Some(script) if !script.starts_with('-') => {
                    Some(vec![program.clone(), script.to_string()])
                }
                _ => None,
            };
        }
        "make" => 2,
        "cargo" | "npm" | "pnpm" | "yarn" | "git" | "go" | "docker" | "kubectl" | "uv"
        | "poetry" | "pip" | "pip3" | "npx" | "bunx" | "dotnet" | "mvn" | "gradle" | "rustup"
        | "apt" | "brew" => 2,
        _ => 1,
    };
    let python_module = words == 3 && name.starts_with("python");
    let prefix: Vec<String> = argv
        .iter()
        .take(words)
        .enumerate()
        .take_while(|(i, a)| {
            (!a.starts_with('-') && !a.contains('/') || *i == 0) || (python_module && *i == 1)
        })
        .map(|(_, a)| a.clone())
        .collect();
    // A tool with subcommands remembered without one (`git -c core.pager=sh log`, `npx -y
    // pkg`, a bare `cargo`) would approve every subcommand: nothing is narrow enough.
    // `make` is the exception: its targets are optional and flags do not pick a program.
    if prefix.len() < words && name != "make" {
        return None;
    }
    Some(prefix)
}

/// Programs that run the command given in their arguments.
const WRAPPERS: &[&str] = &[
    "sudo",
    "doas",
    "su",
    "pkexec",
    "runuser",
    "env",
    "xargs",
    "parallel",
    "nice",
    "ionice",
    "nohup",
    "timeout",
    "time",
    "command",
    "builtin",
    "exec",
    "eval",
    "source",
    ".",
    "watch",
    "strace",
    "ltrace",
    "chroot",
    "setsid",
    "stdbuf",
    "unbuffer",
    "flock",
    "taskset",
    "chrt",
    "ssh",
    "script",
    "find",
    "fakeroot",
    "firejail",
    "bwrap",
    "unshare",
    "nsenter",
    "systemd-run",
    "dbus-launch",
    "xvfb-run",
    "catchsegv",
    "valgrind",
    "perf",
    "gdbserver",
    "rr",
    "proot",
];

/// `tool sub NAME` runs NAME (a script or a package's binary): remembered with NAME.
const RUNNERS: &[(&str, &str)] = &[
    ("npm", "run"),
    ("pnpm", "run"),
    ("yarn", "run"),
    ("bun", "run"),
    ("npm", "exec"),
    ("pnpm", "exec"),
    ("pnpm", "dlx"),
    ("yarn", "exec"),
    ("yarn", "dlx"),
    ("bun", "x"),
    ("uv", "run"),
    ("poetry", "run"),
    ("pipx", "run"),
];

/// Decides a call. `allowed` are the user's configured prefixes, `session` the prefixes
/// approved with "don't ask again" during this session.
pub fn decide(
    policy: ApprovalPolicy,
    need: &ApprovalNeed,
    allowed: &[Vec<String>],
    session: &[Vec<String>],
) -> Decision {
    match need {
        ApprovalNeed::None => Decision::Allow,
        ApprovalNeed::Edit { path, .. } => match policy {
            ApprovalPolicy::AutoEdit | ApprovalPolicy::FullAuto => Decision::Allow,
            ApprovalPolicy::Ask => Decision::Ask,
            ApprovalPolicy::Never => Decision::Decline(format!(
                "editing {path} needs approval and the approval policy is `never`"
            )),
        },
        ApprovalNeed::Input {
            session, program, ..
        } => match policy {
            ApprovalPolicy::FullAuto => Decision::Allow,
            ApprovalPolicy::Never => Decision::Decline(format!(
                "typing into session {session} (`{program}`) needs approval (that program may \
                 run what it reads) and the approval policy is `never`"
            )),
            _ => Decision::Ask,
        },
        ApprovalNeed::Mcp { tool, .. } => {
            if policy == ApprovalPolicy::FullAuto || mcp_tool_is_allowed(tool, allowed, session) {
                return Decision::Allow;
            }
            match policy {
                ApprovalPolicy::Never => Decision::Decline(format!(
                    "calling the MCP tool `{tool}` needs approval (it is not allowed by name in \
                     `[approval] allow`) and the approval policy is `never`"
                )),
                _ => Decision::Ask,
            }
        }
        ApprovalNeed::Command { command, .. } => {
            if policy == ApprovalPolicy::FullAuto {
                return Decision::Allow;
            }
            if command_is_auto_approved(command, allowed, session) {
                return Decision::Allow;
            }
            match policy {
                ApprovalPolicy::Never => Decision::Decline(format!(
                    "running `{command}` needs approval (it is not a known read-only command or \
                     an allowed prefix) and the approval policy is `never`"
                )),
                _ => Decision::Ask,
            }
        }
    }
}

/// True when an MCP tool is allowed by name, as Claude Code writes it: `mcp__SERVER__TOOL`
/// for one tool, `mcp__SERVER` for every tool of a server. `allowed` holds the configured
/// `allow` entries (one word each for these) and `session` what "don't ask again" kept.
pub fn mcp_tool_is_allowed(tool: &str, allowed: &[Vec<String>], session: &[Vec<String>]) -> bool {
    allowed
        .iter()
        .chain(session)
        .any(|entry| match entry.as_slice() {
            [name] if name.starts_with("mcp__") => {
                tool == name
                    || tool.strip_prefix(name.as_str()).is_some_and(|rest| {
                        rest.starts_with("__") && name.matches("__").count() == 1
                    })
            }
            _ => false,
        })
}

/// True when every simple command of `command` is read-only or matches an allowed prefix.
pub fn command_is_auto_approved(
    command: &str,
    allowed: &[Vec<String>],
    session: &[Vec<String>],
) -> bool {
    let Some(parts) = parse::simple_commands(command) else {
        return false;
    };
    !parts.is_empty()
        && parts.iter().all(|cmd| {
            safe::is_read_only(cmd)
                || allowed
                    .iter()
                    .chain(session)
                    .any(|p| matches_prefix_words(&cmd.words, p))
        })
}

/// True when the first words of a command are literally the words of `prefix` (a word the
/// shell decides, like `$x` or `*`, matches nothing).
fn matches_prefix_words(words: &[parse::Word], prefix: &[String]) -> bool {
    !prefix.is_empty()
        && words.len() >= prefix.len()
        && words
            .iter()
            .zip(prefix)
            .all(|(w, p)| w.literal() == Some(p.as_str()))
}

/// A command as the approval prompt shows it: control characters other than newline and tab
/// spelled out (`\u{7f}`). The TUI drops them when drawing and a plain terminal would act on
/// them (`\r`, ESC, backspace rewrite the line), so either way the user would approve text
/// that is not what runs.
pub fn shown_command(command: &str) -> String {
    let mut out = String::with_capacity(command.len());
    for c in command.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// True when `words` starts with exactly the words of `prefix`.
pub fn matches_prefix(words: &[String], prefix: &[String]) -> bool {
    !prefix.is_empty() && words.len() >= prefix.len() && words[..prefix.len()] == *prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_tools_are_allowed_by_exact_name_or_whole_server() {
        let allowed = vec![
            vec!["mcp__docs".to_string()],
            vec!["mcp__fs__read".to_string()],
        ];
        assert!(mcp_tool_is_allowed("mcp__docs__search", &allowed, &[]));
        assert!(mcp_tool_is_allowed("mcp__fs__read", &allowed, &[]));
        assert!(!mcp_tool_is_allowed("mcp__fs__write", &allowed, &[]));
        assert!(!mcp_tool_is_allowed("mcp__docsx__search", &allowed, &[]));
        assert!(!mcp_tool_is_allowed("mcp__fs__read_more", &allowed, &[]));
        // A command prefix never allows a tool, and a tool name in `allow` no command.
        let cmd = vec![vec!["mcp__docs".to_string(), "x".to_string()]];
        assert!(!mcp_tool_is_allowed("mcp__docs__search", &cmd, &[]));
        let need = ApprovalNeed::Mcp {
            tool: "mcp__fs__write".into(),
            server: "fs".into(),
            arguments: "{}".into(),
        };
        assert_eq!(
            decide(ApprovalPolicy::Ask, &need, &allowed, &[]),
            Decision::Ask
        );
        assert_eq!(
            decide(ApprovalPolicy::FullAuto, &need, &allowed, &[]),
            Decision::Allow
        );
        assert!(matches!(
            decide(ApprovalPolicy::Never, &need, &allowed, &[]),
            Decision::Decline(_)
        ));
        let session = vec![vec!["mcp__fs__write".to_string()]];
        assert_eq!(
            decide(ApprovalPolicy::Ask, &need, &allowed, &session),
            Decision::Allow
        );
    }
    use ApprovalPolicy::{Ask, AutoEdit, FullAuto, Never};
    use Decision::{Allow, Decline};

    fn cmd(c: &str) -> ApprovalNeed {
        ApprovalNeed::Command {
            command: c.into(),
            argv: shlex::split(c).unwrap_or_default(),
            cwd: "/ws".into(),
        }
    }

    fn prefixes(list: &[&str]) -> Vec<Vec<String>> {
        list.iter().filter_map(|p| shlex::split(p)).collect()
    }

    #[test]
    fn decision_table() {
        let allowed = prefixes(&["cargo test", "npm run"]);
        let edit = ApprovalNeed::Edit {
            path: "src/lib.rs".into(),
            diff: String::new(),
        };
        let table: &[(ApprovalPolicy, ApprovalNeed, bool)] = &[
            (Ask, ApprovalNeed::None, true),
            (Never, ApprovalNeed::None, true),
            (Ask, cmd("ls -la src"), true),
            (Never, cmd("git status"), true),
            (Ask, cmd("cargo build"), false),
            (AutoEdit, cmd("cargo build"), false),
            (FullAuto, cmd("cargo build"), true),
            (FullAuto, cmd("rm -rf target"), true),
            (Ask, edit.clone(), false),
            (AutoEdit, edit.clone(), true),
            (FullAuto, edit.clone(), true),
            (Never, edit.clone(), false),
            (Ask, cmd("cargo test -q"), true),
            (Never, cmd("cargo test"), true),
        ];
        for (policy, need, allow) in table {
            let d = decide(*policy, need, &allowed, &[]);
            assert_eq!(d == Allow, *allow, "{policy:?} {need:?} → {d:?}");
        }
        assert_eq!(decide(Ask, &cmd("make"), &allowed, &[]), Decision::Ask);
        assert!(
            matches!(decide(Never, &cmd("make"), &allowed, &[]), Decline(r) if r.contains("never"))
        );
        assert!(
            matches!(decide(Never, &edit, &allowed, &[]), Decline(r) if r.contains("src/lib.rs"))
        );
    }

    #[test]
    fn safe_list_table() {
        let table: &[(&str, bool)] = &[
            ("ls", true),
            ("cat README.md | head -20", true),
            ("grep -rn foo src && wc -l src/lib.rs", true),
            ("rg 'fn main' -n", true),
            ("rg --pre ./evil foo", false),
            ("rg -z foo", false),
            ("find . -name '*.rs'", true),
            ("find . -name '*.rs' -exec rm {} \\;", false),
            ("find . -delete", false),
            ("git status", true),
            // Paging subcommands start the user's pager (`less`, whose `!` runs commands) on a
            // terminal: safe with `--no-pager` or output that is not the terminal.
            ("git diff HEAD~1 --stat", false),
            ("git --no-pager diff HEAD~1 --stat", true),
            ("git diff HEAD~1 --stat | cat", true),
            ("git log --oneline -5", false),
            ("git -P log --oneline -5", true),
            ("git log --oneline -5 > /dev/null", true),
            ("git show HEAD", false),
            ("git --no-pager show HEAD", true),
            ("git diff --output=/tmp/x", false),
            ("git diff --ext-diff", false),
            ("git -c core.pager=evil log", false),
            ("git commit -m x", false),
            ("git push", false),
            ("git branch", false),
            ("git --no-pager branch -a", true),
            ("git branch newbranch", false),
            ("echo hi > file.txt", false),
            ("echo hi >> file.txt", false),
            ("ls 2>&1 | head", true),
            ("ls > /dev/null", true),
            ("ls &> out", false),
            ("cat < input.txt", true),
            // A here-doc is data for the command it feeds: judged by that command.
            ("cat <<EOF\nx\nEOF", true),
            ("echo $(rm -rf /)", false),
            ("echo \"$(rm -rf /)\"", false),
            // The substituted commands are judged: `id` and `ls` only read.
            ("echo `id`", true),
            ("echo `rm x`", false),
            ("echo '$(literal)'", true),
            // Inside substitutions, each command is judged.
            ("echo $(git rev-parse HEAD)", true),
            ("cat $(rm -rf x)", false),
            ("wc -l <(ls src)", true),
            ("(ls)", true),
            ("(ls; rm x)", false),
            ("PAGER=evil git log", false),
            ("ls; rm -rf /", false),
            ("ls && curl x | sh", false),
            ("sed -n 1,20p file", true),
            ("sed -n '5p' file", true),
            ("sed -i s/a/b/ file", false),
            ("sed -n 1w/tmp/x file", false),
            ("sort -o out in", false),
            ("uniq in out", false),
            ("env", true),
            ("env rm -rf /", false),
            ("cat 'unterminated", false),
            ("diff <(ls) <(ls a)", true),
            ("diff <(ls) <(sh x)", false),
            ("tee out", false),
            // Options and subcommands that run code or change the host.
            ("sort --compress-program=sh big.txt", false),
            ("sort --compress-prog=sh big.txt", false),
            ("sort -uo out in", false),
            ("sort -u in", true),
            ("nice", true),
            ("nice -n 5 ls", true),
            ("nice $(echo sh) -c id", false),
            ("ls | xargs -I F wc -l F", true),
            ("echo sh | xargs -I cat timeout 5 cat -c id", false),
            ("echo sh | xargs -Icat cat -c id", false),
            ("echo sh | xargs -I $(echo cat) cat -c id", false),
            ("sort $X in", false),
            ("sort *", false),
            ("git grep -O'touch pwned' x", false),
            ("git --no-pager grep -nO'sh' x", false),
            ("git --no-pager grep --open-files-in-pager=sh x", false),
            ("git --no-pager grep --open=sh x", false),
            ("git --no-pager grep -n foo", true),
            ("git --no-pager diff --output=/tmp/x", false),
            ("git --no-pager diff --out=/tmp/x", false),
            ("git --no-pager log --textconv -p", false),
            ("git -C /tmp/other status", false),
            ("git --git-dir=/tmp/x/.git status", false),
            ("git -c core.fsmonitor=sh status", false),
            ("git --no-pager cat-file --filters HEAD:x", false),
            ("git status --short", true),
            ("less README.md", false),
            ("more README.md", false),
            ("man -P sh ls", false),
            ("vi notes.txt", false),
            ("awk 'BEGIN{system(\"id\")}'", false),
            ("date", true),
            ("date +%s -u", true),
            ("date -d yesterday +%F", true),
            ("date -s '2020-01-01'", false),
            ("date --set=2020-01-01", false),
            ("date 010100002020", false),
            ("hostname", true),
            ("hostname -f", true),
            ("hostname evil", false),
            ("hostname -F /etc/x", false),
            ("rg --pre=sh foo", false),
            ("rg --hostname-bin=sh foo", false),
            ("tree -o out", false),
            ("tree -R -H . ", false),
            ("file -C -m x", false),
            ("python3 -c 'print(1)'", false),
            ("perl -e 'print 1'", false),
            ("npm run build", false),
            ("make", false),
            ("tar --to-command=sh -xf x.tar", false),
            ("./ls", false),
            ("/usr/bin/ls -la", true),
            ("eval ls", false),
            ("source x.sh", false),
            (". x.sh", false),
            ("$CMD", false),
            ("sh <<EOF\nid\nEOF\n", false),
            ("cat <<EOF\nhello\nEOF\n", true),
            ("cat <<EOF | sh\nid\nEOF\n", false),
            // Wrappers are judged by what they run.
            ("env ls", true),
            ("env PAGER=sh git log", false),
            ("env -u GIT_PAGER git log", false),
            ("timeout 5 cat x", true),
            ("timeout 5 sh -c id", false),
            ("nice -n 5 grep -r foo", true),
            ("nice sort --compress-program=sh x", false),
            ("ls | xargs wc -l", true),
            ("ls | xargs rm", false),
            ("ls | xargs sort", false),
            ("find . -name x -exec grep -n foo {} +", true),
            ("find . -exec sh -c id \\;", false),
            ("find . -execdir rm {} +", false),
            ("find . -ok rm {} \\;", false),
            ("find . -fprint out", false),
            ("find . -name *.rs", false),
            ("sudo ls", false),
            ("command -v git", true),
            ("", false),
        ];
        let wrong: Vec<_> = table
            .iter()
            .filter(|(c, safe)| command_is_auto_approved(c, &[], &[]) != *safe)
            .collect();
        assert!(wrong.is_empty(), "judged wrongly: {wrong:#?}");
    }

    #[test]
    fn prefixes_match_words_not_text() {
        let allowed = prefixes(&["cargo test", "npm run"]);
        let ok = |c: &str| command_is_auto_approved(c, &allowed, &[]);
        assert!(ok("cargo test"));
        assert!(ok("cargo test --release -- --nocapture"));
        assert!(!ok("cargo testfoo"));
        assert!(!ok("cargo"));
        assert!(!ok("cargo build"));
        assert!(ok("cargo test 2>&1 | tail -5"));
        assert!(!ok("cargo test && rm -rf /"));
        assert!(!ok("cargo test > log.txt"));
        assert!(ok("'cargo' \"test\""));
        assert!(ok("npm run build"));
        let session = prefixes(&["make"]);
        assert!(command_is_auto_approved("make -j4", &[], &session));
        assert!(!command_is_auto_approved("makefoo", &[], &session));
    }

    #[test]
    fn remembered_prefixes_are_as_narrow_as_what_was_shown() {
        let s = |c: &str| remember_prefix(c, &[]).map(|p| p.join(" "));
        let some = |t: &str| Some(t.to_string());
        assert_eq!(s("cargo test -q"), some("cargo test"));
        assert_eq!(s("git status --short"), some("git status"));
        assert_eq!(s("npm run build --watch"), some("npm run build"));
        assert_eq!(s("python3 -m pytest tests"), some("python3 -m pytest"));
        assert_eq!(s("make -j4"), some("make"));
        assert_eq!(s("ls -la /tmp"), some("ls"));
        assert_eq!(s("./build.sh all"), some("./build.sh"));
        // An interpreter is remembered with its script, never alone.
        assert_eq!(s("python3 script.py"), some("python3 script.py"));
        assert_eq!(s("python3 -c 'import os'"), None);
        assert_eq!(s("bash -c 'rm -rf ~'"), None);
        assert_eq!(s("node"), None);
        // Compound commands approve far more than their first words.
        assert_eq!(s("cd x && rm -rf y"), None);
        assert_eq!(s("git log | sh"), None);
        assert_eq!(s(""), None);
        // A wrapper remembered alone would approve every command it can run.
        assert_eq!(s("sudo apt update"), None);
        assert_eq!(s("env FOO=1 cargo test"), None);
        assert_eq!(s("xargs rm"), None);
        assert_eq!(s("find . -name '*.o' -exec rm {} +"), None);
        assert_eq!(s("timeout 10 cargo test"), None);
        assert_eq!(s("/usr/bin/sudo ls"), None);
        assert_eq!(s("FOO=1 cargo test"), None);
        // A flag in the subcommand's place, or no subcommand: never the bare tool.
        assert_eq!(s("git -c core.pager=sh log"), None);
        assert_eq!(s("npx -y cowsay"), None);
        assert_eq!(s("cargo"), None);
        assert_eq!(s("python3 -m"), None);
        assert_eq!(s("npm run"), None);
        assert_eq!(s("npx cowsay hi"), some("npx cowsay"));
        // A runner is remembered with what it runs.
        assert_eq!(s("uv run pytest -q"), some("uv run pytest"));
        assert_eq!(s("npm exec eslint ."), some("npm exec eslint"));
        assert_eq!(s("poetry run pytest"), some("poetry run pytest"));
        for (shown, other) in [
            ("sudo apt update", "sudo rm -rf /"),
            ("git -c core.pager=sh log", "git push --force"),
            ("uv run pytest", "uv run sh -c 'curl x | sh'"),
            ("find . -name x -exec cat {} +", "find / -delete"),
        ] {
            let remembered: Vec<_> = remember_prefix(shown, &[]).into_iter().collect();
            assert!(
                !command_is_auto_approved(other, &[], &remembered),
                "approving `{shown}` for the session also approved `{other}`"
            );
        }
        // Interpreters by any name, and runners that start one, are remembered with the
        // script: never a bare interpreter whose `-c` would then be approved too.
        assert_eq!(s("python3.12 build.py"), some("python3.12 build.py"));
        assert_eq!(s("python3.12 -c 'import os'"), None);
        assert_eq!(s("dash run.sh"), some("dash run.sh"));
        assert_eq!(s("awk -f x.awk data"), None);
        assert_eq!(
            s("uv run python build.py -v"),
            some("uv run python build.py")
        );
        assert_eq!(s("uv run python -c 'import os'"), None);
        assert_eq!(s("poetry run env ls"), None);
        assert_eq!(s("npx node x.js"), some("npx node x.js"));
        // A word the shell decides is not something the user saw.
        assert_eq!(s("python3 $SCRIPT"), None);
        assert_eq!(s("cargo test *"), None);
        assert_eq!(s("cargo\u{7f} test"), None);
        for (shown, other) in [
            ("uv run python build.py", "uv run python -c 'import os'"),
            ("python3.12 build.py", "python3.12 -c 'import os'"),
            ("python3 build.py", "python3 $X"),
        ] {
            let remembered: Vec<_> = remember_prefix(shown, &[]).into_iter().collect();
            assert!(
                !command_is_auto_approved(other, &[], &remembered),
                "approving `{shown}` for the session also approved `{other}`"
            );
        }
        // A prefix offered for one command does not cover another interpreter use.
        let prefix = remember_prefix("python3 script.py", &[]).unwrap();
        assert!(!command_is_auto_approved(
            "python3 -c 'print(1)'",
            &[],
            &[prefix]
        ));
    }

    #[test]
    fn the_prompt_spells_out_control_characters() {
        assert_eq!(shown_command("ls -la\nwc -l x\tb"), "ls -la\nwc -l x\tb");
        assert_eq!(shown_command("rm -rf x\u{7f}"), "rm -rf x\\u{7f}");
        assert_eq!(
            shown_command("rm -rf ~\r\u{1b}[2Kls"),
            "rm -rf ~\\u{d}\\u{1b}[2Kls"
        );
    }

    #[test]
    fn policies_parse_in_kebab_case() {
        use std::str::FromStr;
        for (s, p) in [
            ("ask", Ask),
            ("auto-edit", AutoEdit),
            ("full-auto", FullAuto),
            ("never", Never),
        ] {
            assert_eq!(ApprovalPolicy::from_str(s), Ok(p));
            assert_eq!(serde_json::to_value(p).unwrap(), serde_json::json!(s));
        }
    }
}
