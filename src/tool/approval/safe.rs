//! The read-only safe list: simple commands that run without asking because no argument can
//! make them write a file, run another program, change the host, or open something
//! interactive that can (a pager, an editor). It names programs and, for git, exact
//! subcommands; options that write or run code are refused, in any spelling the program
//! accepts (an abbreviated `--compress-prog=sh`, a bundled `-uo out`). Wrappers (`env`,
//! `timeout`, `nice`, `xargs`, `find -exec`) are judged by what they run.

use super::parse::{SimpleCommand, Word};

/// True when `cmd` is on the safe list with these arguments.
pub fn is_read_only(cmd: &SimpleCommand) -> bool {
    judge(&cmd.words, cmd.output_redirected, 0)
}

/// Programs no argument of which writes, runs code or changes the host: their arguments may
/// be unknown (a `$var`, a glob).
const ANY_ARGUMENTS: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "pwd",
    "echo",
    "true",
    "false",
    "which",
    "whoami",
    "uname",
    "stat",
    "du",
    "df",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "nl",
    "cut",
    "tr",
    "diff",
    "cmp",
    "grep",
    "egrep",
    "fgrep",
    "id",
    "printenv",
    "column",
    "rev",
    "seq",
    "type",
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "comm",
    "paste",
    "fold",
    "tac",
    "od",
    "strings",
    "jq",
];

/// Wrappers nest at most this deep (`timeout 5 nice env ls`).
const MAX_DEPTH: usize = 4;

fn judge(words: &[Word], output_redirected: bool, depth: usize) -> bool {
    let Some((Word::Literal(program), args)) = words.split_first() else {
        return false;
    };
    if depth > MAX_DEPTH {
        return false;
    }
    // A path to the program is judged by its name only when it is a system one: `./ls` is
    // whatever the model wrote.
    let name = match program.rsplit_once('/') {
        Some((dir, name)) if is_system_bin(dir) => name,
        Some(_) => return false,
        None => program.as_str(),
    };
    if ANY_ARGUMENTS.contains(&name) {
        return true;
    }
    let Some(literal): Option<Vec<&str>> = args.iter().map(Word::literal).collect() else {
        // An unknown word could be any option; only the wrappers below place them safely.
        return match name {
            "xargs" | "find" | "timeout" | "nice" | "env" => {
                wrapper(name, args, output_redirected, depth)
            }
            _ => false,
        };
    };
    match name {
        // bash evaluates the array subscript of a variable name these builtins are handed,
        // and a `$(…)` in it runs: `printf -v 'a[$(cmd)]' x`, `test -v 'a[$(cmd)]'`.
        "printf" => !literal.iter().any(|a| a.starts_with("-v")),
        "test" | "[" => !literal.iter().any(|a| matches!(*a, "-v" | "-R")),
        "sort" => {
            !has_short(&literal, 'o') && !has_long(&literal, &["--output", "--compress-program"])
        }
        // A second file is the output; after `--` a word starting with `-` is a file too
        // (`uniq -- in -out` writes `-out`).
        "uniq" => {
            let ends = literal
                .iter()
                .position(|a| *a == "--")
                .unwrap_or(literal.len());
            let files = literal[..ends]
                .iter()
                .filter(|a| !a.starts_with('-'))
                .count()
                + literal.len().saturating_sub(ends + 1);
            files <= 1
        }
        "tree" => {
            !has_short(&literal, 'o')
                && !has_short(&literal, 'R')
                && !has_long(&literal, &["--output"])
        }
        "file" => !has_short(&literal, 'C') && !has_long(&literal, &["--compile"]),
        "rg" => {
            !has_short(&literal, 'z')
                && !has_long(
                    &literal,
                    &["--pre", "--pre-glob", "--search-zip", "--hostname-bin"],
                )
        }
        "sed" => is_sed_print(&literal),
        "date" => date_only_reads(&literal),
        "hostname" => literal.iter().all(|a| {
            matches!(
                *a,
                "-f" | "-s"
                    | "-d"
                    | "-i"
                    | "-I"
                    | "-A"
                    | "-a"
                    | "--fqdn"
                    | "--long"
                    | "--short"
                    | "--domain"
                    | "--ip-address"
                    | "--all-ip-addresses"
                    | "--all-fqdns"
                    | "--alias"
            )
        }),
        "git" => git_only_reads(&literal, output_redirected),
        "xargs" | "find" | "timeout" | "nice" | "env" | "command" | "stdbuf" | "time" => {
            wrapper(name, args, output_redirected, depth)
        }
        _ => false,
    }
}

fn is_system_bin(dir: &str) -> bool {
    matches!(
        dir,
        "/bin" | "/usr/bin" | "/usr/local/bin" | "/sbin" | "/usr/sbin"
    )
}

/// A bundled short option (`-uo`) containing `flag`. Conservative: a letter inside an option's
/// glued value (`-k1o`) counts too.
fn has_short(args: &[&str], flag: char) -> bool {
    args.iter()
        .any(|a| a.starts_with('-') && !a.starts_with("--") && a[1..].contains(flag))
}

/// A long option that is one of `names` or an abbreviation of one (getopt_long and git's
/// parse-options accept any unambiguous prefix: `--compress-prog`, `--out`), with or
/// without `=value`.
fn has_long(args: &[&str], names: &[&str]) -> bool {
    args.iter().any(|a| {
        let Some(given) = a.strip_prefix("--") else {
            return false;
        };
        let given = given.split('=').next().unwrap_or(given);
        !given.is_empty()
            && names.iter().any(|n| {
                let n = n.trim_start_matches('-');
                n.starts_with(given) || given.starts_with(n)
            })
    })
}

/// `sed -n 'N[,M]p' [FILE]…`: no `w`/`e`/`r` commands, no `-i`, no script files.
fn is_sed_print(args: &[&str]) -> bool {
    let [n, script, files @ ..] = args else {
        return false;
    };
    if *n != "-n" || files.iter().any(|a| a.starts_with('-')) {
        return false;
    }
    let Some(range) = script.strip_suffix('p') else {
        return false;
    };
    let addr = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit() || c == '$');
    match range.split_once(',') {
        None => addr(range),
        Some((a, b)) => addr(a) && addr(b),
    }
}

/// `date` prints; `date -s …`, `date --set=…` and `date MMDDhhmm` set the clock.
fn date_only_reads(args: &[&str]) -> bool {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match *a {
            _ if a.starts_with('+') => {}
            "-u" | "--utc" | "--universal" | "-R" | "--rfc-email" | "--rfc-2822" => {}
            _ if a.starts_with("-I") || a.starts_with("--iso-8601") => {}
            _ if a.starts_with("--rfc-3339=") => {}
            _ if a.starts_with("--date=") || a.starts_with("--reference=") => {}
            "-d" | "--date" | "-r" | "--reference" => i += 1,
            _ => return false,
        }
        i += 1;
    }
    true
}

/// Git subcommands that only read, with the options that write (`--output`) or run programs
/// (`--ext-diff`, `--textconv`, `-O`/`--open-files-in-pager`, `--upload-pack`…) refused.
/// Nothing may come before the subcommand but `--no-pager`: `-c`, `--config-env`, `-C`,
/// `--git-dir`, `--exec-path` choose the configuration (pagers, fsmonitor, aliases) or the
/// repository the command trusts. Subcommands that page need `--no-pager` or output that is
/// not a terminal: the pager is the user's `less`, whose `!` runs commands.
fn git_only_reads(args: &[&str], output_redirected: bool) -> bool {
    let mut rest = args;
    let mut no_pager = output_redirected;
    while let Some((first, tail)) = rest.split_first() {
        match *first {
            "--no-pager" | "-P" => no_pager = true,
            _ if first.starts_with('-') => return false,
            _ => break,
        }
        rest = tail;
    }
    let Some((sub, opts)) = rest.split_first() else {
        return false;
    };
    let runs_or_writes = has_long(
        opts,
        &[
            "--output",
            "--ext-diff",
            "--textconv",
            "--filters",
            "--open-files-in-pager",
            "--upload-pack",
            "--receive-pack",
            "--exec",
            "--config",
            "--paginate",
            "--no-index",
        ],
    ) || opts.iter().any(|a| a.starts_with("--output"));
    if runs_or_writes {
        return false;
    }
    match *sub {
        "status" | "ls-files" | "rev-parse" | "describe" | "ls-tree" => true,
        "cat-file" => true,
        "grep" => no_pager && !has_short(opts, 'O'),
        "diff" | "log" | "show" | "blame" | "shortlog" => no_pager,
        "branch" | "tag" | "remote" => {
            // Listing only: flags that just select what to show (`branch`/`tag` list through
            // the pager).
            (no_pager || *sub == "remote")
                && opts.iter().all(|a| {
                    matches!(
                        *a,
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

/// Wrappers that run a command from their arguments, judged by that command: `env CMD`
/// (no assignments, no `-u`/`-i`: they change what CMD does), `timeout DUR CMD`, `nice
/// [-n N] CMD`, `command CMD`, `stdbuf -oL CMD`, `time CMD`, `xargs [-0 -n N …] CMD` and
/// `find … -exec CMD … ;` (CMD gets file names it cannot know: judged with an unknown word
/// appended). `find -delete`/`-fprint*`/`-fls` write.
fn wrapper(name: &str, args: &[Word], output_redirected: bool, depth: usize) -> bool {
    let lit = |w: &Word| w.literal().map(str::to_string);
    let inner = |rest: &[Word]| rest.is_empty() || judge(rest, output_redirected, depth + 1);
    match name {
        "env" => {
            let first_is_option = args
                .first()
                .is_some_and(|w| lit(w).is_none_or(|a| a.starts_with('-') || a.contains('=')));
            !first_is_option && inner(args)
        }
        "command" => match args.first().and_then(Word::literal) {
            Some("-v" | "-V") => true,
            Some(a) if a.starts_with('-') => false,
            _ => inner(args),
        },
        "time" => inner(args),
        "stdbuf" => {
            let opts = args
                .iter()
                .take_while(|w| lit(w).is_some_and(|a| a.starts_with('-')))
                .count();
            args[..opts].iter().all(|w| {
                lit(w).is_some_and(|a| {
                    let a = a.as_str();
                    ["-i", "-o", "-e", "--input=", "--output=", "--error="]
                        .iter()
                        .any(|p| a.starts_with(p))
                })
            }) && !args[opts..].is_empty()
                && inner(&args[opts..])
        }
        "nice" => {
            let mut i = 0;
            let Some(first) = args.first() else {
                // Plain `nice` prints the niceness.
                return true;
            };
            // An unknown first word could be the program itself (`nice $(echo sh)`).
            match first.literal() {
                Some("-n") => i = 2,
                Some(a) if a.starts_with("--adjustment=") => i = 1,
                Some(a) if a.starts_with('-') && a[1..].chars().all(|c| c.is_ascii_digit()) => {
                    i = 1
                }
                Some(a) if a.starts_with('-') => return false,
                None => return false,
                _ => {}
            }
            args.get(i).is_some() && inner(&args[i..])
        }
        "timeout" => {
            let mut i = 0;
            while let Some(a) = args.get(i).and_then(Word::literal) {
                match a {
                    "-s" | "-k" | "--signal" | "--kill-after" => i += 2,
                    "--preserve-status" | "--foreground" | "-v" | "--verbose" => i += 1,
                    _ if a.starts_with("--signal=") || a.starts_with("--kill-after=") => i += 1,
                    _ if a.starts_with('-') => return false,
                    _ => break,
                }
            }
            // The duration, then the command.
            args.get(i).and_then(Word::literal).is_some() && {
                let rest = &args[(i + 1).min(args.len())..];
                !rest.is_empty() && inner(rest)
            }
        }
        "xargs" => {
            let mut i = 0;
            // `-I R` replaces R inside every word of the command, so a word holding R is not
            // what runs: a literal `cat` becomes the input's `sh`.
            let mut replace: Option<String> = None;
            while let Some(a) = args.get(i).and_then(Word::literal) {
                match a {
                    "-I" => {
                        match args.get(i + 1).and_then(Word::literal) {
                            Some(r) if !r.is_empty() => replace = Some(r.to_string()),
                            _ => return false,
                        }
                        i += 2
                    }
                    _ if a.len() > 2 && a.starts_with("-I") => {
                        replace = Some(a[2..].to_string());
                        i += 1
                    }
                    "-0" | "--null" | "-r" | "--no-run-if-empty" | "-t" | "--verbose" | "-x" => {
                        i += 1
                    }
                    "-n" | "-L" | "-d" | "-P" | "-s" | "-E" => i += 2,
                    _ if a.starts_with("--max-args=")
                        || a.starts_with("--max-procs=")
                        || a.starts_with("--delimiter=")
                        || (a.len() > 2
                            && ["-n", "-L", "-P", "-d", "-s"]
                                .iter()
                                .any(|p| a.starts_with(p))) =>
                    {
                        i += 1
                    }
                    _ if a.starts_with('-') => return false,
                    _ => break,
                }
            }
            if args.get(i).is_some_and(|w| w.literal().is_none()) {
                return false;
            }
            let mut cmd: Vec<Word> = args[i.min(args.len())..]
                .iter()
                .map(|w| match (w.literal(), &replace) {
                    (Some(a), Some(r)) if a.contains(r.as_str()) => Word::Dynamic(a.to_string()),
                    _ => w.clone(),
                })
                .collect();
            if cmd.is_empty() {
                // Plain `xargs` echoes its input.
                return true;
            }
            cmd.push(Word::Dynamic("<input>".into()));
            judge(&cmd, output_redirected, depth + 1)
        }
        "find" => {
            let mut i = 0;
            while let Some(w) = args.get(i) {
                // An unknown word could expand to `-delete` or `-exec`.
                let Some(a) = w.literal() else {
                    return false;
                };
                match a {
                    "-delete" | "-fprint" | "-fprint0" | "-fprintf" | "-fls" => return false,
                    "-exec" | "-execdir" | "-ok" | "-okdir" => {
                        let start = i + 1;
                        let end = (start..args.len())
                            .find(|&j| matches!(args[j].literal(), Some(";" | "+")));
                        let Some(end) = end else {
                            return false;
                        };
                        let mut cmd: Vec<Word> = args[start..end]
                            .iter()
                            .map(|w| match w.literal() {
                                Some(a) if a.contains("{}") => Word::Dynamic(a.to_string()),
                                _ => w.clone(),
                            })
                            .collect();
                        cmd.push(Word::Dynamic("{}".into()));
                        if !judge(&cmd, output_redirected, depth + 1) {
                            return false;
                        }
                        i = end + 1;
                    }
                    _ => i += 1,
                }
            }
            true
        }
        _ => false,
    }
}
