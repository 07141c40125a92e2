//! Approval decisions: given the policy, what a call needs, and the command prefixes the user
//! allowed (config) or approved this session, say Allow, Ask or Decline. Commands are judged on
//! their parsed words, never on raw text: a command line is split into simple commands at
//! `|`, `&&`, `||`, `;`, `&` and newlines, and it is auto-approved only when every part is a
//! known read-only command (or matches an allowed prefix word for word) and nothing writes
//! through a redirection, substitutes a command, or sets environment variables.

use crate::tool::ApprovalNeed;

use crate::protocol::ApprovalPolicy;

/// The outcome for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Ask,
    Decline(String),
}

/// Interpreters whose first argument may be code (`-c`, `-e`) or a script: "don't ask again"
/// remembers the script, never the bare interpreter.
const INTERPRETERS: &[&str] = &[
    "python", "python3", "node", "bash", "sh", "zsh", "ruby", "perl", "deno", "bun",
];

/// The argv prefix offered for "yes, don't ask again" on a command — exactly what the user is
/// shown and what is remembered. The program plus its subcommand for tools that have them
/// (`cargo test`, `npm run build`, `git commit`, `python3 -m pytest`), an interpreter with its
/// script (`python3 build.py`), else the program. `None` where no prefix is narrow enough: a
/// compound command (`cd x && rm -rf y`), an interpreter running inline code (`python3 -c …`).
pub fn remember_prefix(command: &str, argv: &[String]) -> Option<Vec<String>> {
    if ["&&", "||", ";", "|", "`", "$(", ">", "<", "\n", "&"]
        .iter()
        .any(|op| command.contains(op))
    {
        return None;
    }
    let parsed;
    let argv = if argv.is_empty() {
        parsed = shlex::split(command)?;
        &parsed[..]
    } else {
        argv
    };
    let program = argv.first()?;
    // `NAME=value cmd` is never auto-approved, so a prefix for it would be a lie.
    if is_assignment(program) {
        return None;
    }
    let name = program.rsplit('/').next().unwrap_or(program);
    // A wrapper runs the command in its arguments: remembering `sudo` (or `env`, `xargs`)
    // would approve every command behind it, none of which the user was shown.
    if WRAPPERS.contains(&name) {
        return None;
    }
    let arg = |i: usize| argv.get(i).map(String::as_str);
    let words = match name {
        "python" | "python3" if arg(1) == Some("-m") => 3,
        _ if RUNNERS
            .iter()
            .any(|(tool, sub)| *tool == name && arg(1) == Some(*sub)) =>
        {
            3
        }
        _ if INTERPRETERS.contains(&name) => {
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
        | "poetry" | "pip" | "pip3" | "npx" | "dotnet" | "mvn" | "gradle" | "rustup" | "apt"
        | "brew" => 2,
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
    "sudo", "doas", "su", "pkexec", "runuser", "env", "xargs", "parallel", "nice", "ionice",
    "nohup", "timeout", "time", "command", "builtin", "exec", "eval", "source", ".", "watch",
    "strace", "ltrace", "chroot", "setsid", "stdbuf", "unbuffer", "flock", "taskset", "chrt",
    "ssh", "script", "busybox", "find", "fakeroot", "firejail", "bwrap",
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

/// True when every simple command of `command` is read-only or matches an allowed prefix.
pub fn command_is_auto_approved(
    command: &str,
    allowed: &[Vec<String>],
    session: &[Vec<String>],
) -> bool {
    let Some(parts) = split_simple_commands(command) else {
        return false;
    };
    !parts.is_empty()
        && parts.iter().all(|words| {
            is_read_only(words)
                || allowed
                    .iter()
                    .chain(session)
                    .any(|p| matches_prefix(words, p))
        })
}

/// True when `words` starts with exactly the words of `prefix`.
pub fn matches_prefix(words: &[String], prefix: &[String]) -> bool {
    !prefix.is_empty() && words.len() >= prefix.len() && words[..prefix.len()] == *prefix
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    /// A command separator: `|`, `||`, `&&`, `;`, `&`, newline.
    Sep,
}

/// Splits a command line into simple commands (their words). `None` when the line does
/// anything the safe list can't vouch for: output redirection to a file, command or process
/// substitution, subshells, here-docs, variable assignments, or unbalanced quotes.
fn split_simple_commands(line: &str) -> Option<Vec<Vec<String>>> {
    let tokens = tokenize(line)?;
    let mut parts = Vec::new();
    let mut current = Vec::new();
    for t in tokens {
        match t {
            Token::Word(w) => current.push(w),
            Token::Sep => {
                if !current.is_empty() {
                    parts.push(std::mem::take(&mut current));
                }
            }
        }
    }
    if !current.is_empty() {
        parts.push(current);
    }
    for p in &parts {
        // `NAME=value cmd` changes how the command behaves (PAGER, GIT_EXTERNAL_DIFF, …).
        if p.first().is_some_and(|w| is_assignment(w)) {
            return None;
        }
    }
    Some(parts)
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

fn tokenize(line: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let flush = |word: &mut String, in_word: &mut bool, tokens: &mut Vec<Token>| {
        if *in_word {
            tokens.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => word.push(ch),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => {
                            let ch = chars.next()?;
                            if !matches!(ch, '"' | '\\' | '$' | '`' | '\n') {
                                word.push('\\');
                            }
                            word.push(ch);
                        }
                        '`' => return None,
                        '$' if matches!(chars.peek(), Some('(')) => return None,
                        ch => word.push(ch),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next()? {
                    '\n' => {}
                    ch => word.push(ch),
                }
            }
            '`' => return None,
            '$' if matches!(chars.peek(), Some('(')) => return None,
            '(' | ')' | '{' | '}' if !in_word => return None,
            ' ' | '\t' => flush(&mut word, &mut in_word, &mut tokens),
            '\n' | ';' => {
                flush(&mut word, &mut in_word, &mut tokens);
                tokens.push(Token::Sep);
            }
            '|' | '&' => {
                // `&>` and `>&` are redirections; `&` alone, `&&`, `|`, `||`, `|&` separate.
                if c == '&' && matches!(chars.peek(), Some('>')) {
                    return None;
                }
                flush(&mut word, &mut in_word, &mut tokens);
                if matches!(chars.peek(), Some('|') | Some('&')) {
                    chars.next();
                }
                tokens.push(Token::Sep);
            }
            '<' => {
                // Input redirection reads a file: fine. Here-docs/strings and process
                // substitution are not judged.
                if matches!(chars.peek(), Some('<') | Some('(')) {
                    return None;
                }
                // An fd number glued before `<` (e.g. `0<`) is part of the operator.
                if in_word && word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                flush(&mut word, &mut in_word, &mut tokens);
                skip_redirect_target(&mut chars)?;
            }
            '>' => {
                // Only fd duplication (`2>&1`, `>&2`) and /dev/null are not writes.
                let fd_prefix = in_word && word.chars().all(|c| c.is_ascii_digit());
                if in_word && !fd_prefix {
                    flush(&mut word, &mut in_word, &mut tokens);
                } else {
                    word.clear();
                    in_word = false;
                }
                if matches!(chars.peek(), Some('(')) {
                    return None;
                }
                if matches!(chars.peek(), Some('&')) {
                    chars.next();
                    let mut fd = String::new();
                    while let Some(d) = chars
                        .peek()
                        .copied()
                        .filter(|d| d.is_ascii_digit() || *d == '-')
                    {
                        fd.push(d);
                        chars.next();
                    }
                    if fd.is_empty() {
                        return None;
                    }
                    continue;
                }
                if matches!(chars.peek(), Some('>') | Some('|')) {
                    chars.next();
                }
                let target = skip_redirect_target(&mut chars)?;
                if target != "/dev/null" {
                    return None;
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush(&mut word, &mut in_word, &mut tokens);
    Some(tokens)
}

/// Reads the (unquoted, simple) target word of a redirection.
fn skip_redirect_target(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
    while matches!(chars.peek(), Some(' ') | Some('\t')) {
        chars.next();
    }
    let mut target = String::new();
    while let Some(c) = chars.peek().copied() {
        if c.is_whitespace() || matches!(c, ';' | '|' | '&' | '<' | '>' | '(' | ')') {
            break;
        }
        if matches!(c, '\'' | '"' | '\\' | '$' | '`') {
            return None;
        }
        target.push(c);
        chars.next();
    }
    (!target.is_empty()).then_some(target)
}

/// Commands that only read, with the arguments that would make them write or run programs
/// excluded.
fn is_read_only(words: &[String]) -> bool {
    let Some((cmd, args)) = words.split_first() else {
        return false;
    };
    let has = |flags: &[&str]| {
        args.iter().any(|a| {
            flags
                .iter()
                .any(|f| a == f || (f.starts_with("--") && a.starts_with(&format!("{f}="))))
        })
    };
    match cmd.as_str() {
        "ls" | "cat" | "head" | "tail" | "wc" | "pwd" | "echo" | "printf" | "true" | "false"
        | "which" | "whoami" | "uname" | "date" | "stat" | "file" | "du" | "df" | "tree"
        | "basename" | "dirname" | "realpath" | "readlink" | "nl" | "cut" | "tr" | "diff"
        | "cmp" | "grep" | "egrep" | "fgrep" | "id" | "env" | "printenv" | "hostname"
        | "column" | "rev" | "seq" | "test" | "[" | "type" | "md5sum" | "sha256sum" | "sha1sum"
        | "less" | "more" => {
            cmd != "env" || args.is_empty() // `env CMD` runs CMD
        }
        "sort" => !has(&["-o", "--output"]),
        "uniq" => args.iter().filter(|a| !a.starts_with('-')).count() <= 1,
        "rg" => !has(&["--pre", "--pre-glob", "-z", "--search-zip"]),
        "find" => !has(&[
            "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf",
            "-fls",
        ]),
        "sed" => {
            // Only `sed -n 'N[,M]p' [FILE]…`: no w/e/r commands, no -i.
            args.first().is_some_and(|a| a == "-n")
                && args.get(1).is_some_and(|s| is_sed_print(s))
                && args[2..].iter().all(|a| !a.starts_with('-'))
        }
        "git" => is_read_only_git(args),
        _ => false,
    }
}

fn is_sed_print(script: &str) -> bool {
    let Some(range) = script.strip_suffix('p') else {
        return false;
    };
    let mut parts = range.split(',');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit() || c == '$'))
    };
    match (parts.next(), parts.next(), parts.next()) {
        (a, None, None) => ok(a),
        (a, b, None) => ok(a) && ok(b),
        _ => false,
    }
}

fn is_read_only_git(args: &[String]) -> bool {
    let Some((sub, rest)) = args.split_first() else {
        return false;
    };
    // Anything before the subcommand (`-c k=v`, `--exec-path`, `-C dir`) is not judged.
    let writes_or_runs = |a: &String| {
        a == "--output"
            || a.starts_with("--output=")
            || a == "--ext-diff"
            || a.starts_with("--exec")
            || a == "--no-index"
    };
    match sub.as_str() {
        "status" | "diff" | "log" | "show" | "blame" | "shortlog" | "ls-files" | "rev-parse"
        | "describe" | "grep" | "cat-file" | "ls-tree" => !rest.iter().any(writes_or_runs),
        "branch" | "tag" | "remote" => {
            // Listing only: flags that just select what to show.
            rest.iter().all(|a| {
                matches!(
                    a.as_str(),
                    "-a" | "-r"
                        | "-v"
                        | "-vv"
                        | "--list"
                        | "-l"
                        | "--all"
                        | "--show-current"
                        | "--merged"
                        | "--no-merged"
                        | "--contains"
                        | "--verbose"
                )
            })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            ("git diff HEAD~1 --stat", true),
            ("git log --oneline -5", true),
            ("git show HEAD", true),
            ("git diff --output=/tmp/x", false),
            ("git diff --ext-diff", false),
            ("git -c core.pager=evil log", false),
            ("git commit -m x", false),
            ("git push", false),
            ("git branch", true),
            ("git branch newbranch", false),
            ("echo hi > file.txt", false),
            ("echo hi >> file.txt", false),
            ("ls 2>&1 | head", true),
            ("ls > /dev/null", true),
            ("ls &> out", false),
            ("cat < input.txt", true),
            ("cat <<EOF\nx\nEOF", false),
            ("echo $(rm -rf /)", false),
            ("echo \"$(rm -rf /)\"", false),
            ("echo `id`", false),
            ("echo '$(literal)'", true),
            ("(ls)", false),
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
            ("diff <(ls) <(ls a)", false),
            ("tee out", false),
            ("", false),
        ];
        for (c, safe) in table {
            assert_eq!(command_is_auto_approved(c, &[], &[]), *safe, "{c:?}");
        }
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
        // A prefix offered for one command does not cover another interpreter use.
        let prefix = remember_prefix("python3 script.py", &[]).unwrap();
        assert!(!command_is_auto_approved(
            "python3 -c 'print(1)'",
            &[],
            &[prefix]
        ));
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
