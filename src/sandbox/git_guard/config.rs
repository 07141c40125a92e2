//! Reading git's config format far enough to find, and comment out, entries that run code.

use std::path::Path;

/// One `name = value` of a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Lowercased section name.
    pub section: String,
    /// Subsection as written (case matters), if any.
    pub subsection: Option<String>,
    /// Lowercased key.
    pub key: String,
    pub value: String,
    /// First line of the entry (0-based) and how many lines it spans.
    pub line: usize,
    pub lines: usize,
    /// Byte offset of the key in its first line (non-zero after a `[section]` header).
    pub column: usize,
}

impl Entry {
    /// `section.subsection.key` with section and key lowercased, as `git config -l` prints.
    pub fn name(&self) -> String {
        match &self.subsection {
            Some(s) => format!("{}.{}.{}", self.section, s, self.key),
            None => format!("{}.{}", self.section, self.key),
        }
    }

    /// Whether git may run a program (or read more config) because of this entry: any
    /// entry but the known-inert ones (see [`runs_code`]).
    pub fn runs_code(&self) -> bool {
        runs_code(
            &self.section,
            self.subsection.is_some(),
            &self.key,
            &self.value,
        )
    }
}

/// Whether git may run a program (or read more config, or reach further) because of this
/// entry: every key but those known to name no program. An allow-list, because a
/// deny-list of git's command-running keys cannot know third-party ones (git-lfs's
/// `lfs.extension.*.clean`, `lfs.customtransfer.*.path`, git-annex's `annex.*-command`),
/// and `git` runs them all. The keys kept are what `git init`, `git clone`, `git submodule`
/// and `git worktree` write and the everyday settings beside them: layout and format
/// (`core.*` below, `extensions.*`), where to fetch and push (`remote.*` URLs and
/// refspecs: `ext::` URLs stay refused by git's own `protocol.allow` default), branch
/// tracking, submodule registration, the author's name and e-mail, and a few behaviour
/// switches whose values are words or numbers.
pub fn runs_code(section: &str, has_sub: bool, key: &str, value: &str) -> bool {
    !inert(section, has_sub, key, value)
}

fn inert(section: &str, has_sub: bool, key: &str, value: &str) -> bool {
    match (section, has_sub) {
        ("core", false) => matches!(
            key,
            "repositoryformatversion"
                | "bare"
                | "filemode"
                | "logallrefupdates"
                | "ignorecase"
                | "precomposeunicode"
                | "symlinks"
                | "worktree"
                | "autocrlf"
                | "eol"
                | "safecrlf"
                | "quotepath"
                | "sparsecheckout"
                | "sparsecheckoutcone"
                | "checkstat"
                | "trustctime"
                | "abbrev"
                | "compression"
                | "longpaths"
                | "untrackedcache"
                | "splitindex"
                | "preloadindex"
                | "commitgraph"
                | "multipackindex"
                | "protecthfs"
                | "protectntfs"
                | "warnambiguousrefs"
        ),
        ("extensions", false) => matches!(
            key,
            "objectformat"
                | "refstorage"
                | "worktreeconfig"
                | "partialclone"
                | "preciousobjects"
                | "noop"
        ),
        ("remote", true) => matches!(
            key,
            "url"
                | "pushurl"
                | "fetch"
                | "push"
                | "tagopt"
                | "prune"
                | "prunetags"
                | "mirror"
                | "promisor"
                | "partialclonefilter"
                | "skipdefaultupdate"
                | "skipfetchall"
        ),
        ("branch", true) => matches!(
            key,
            "remote" | "merge" | "rebase" | "pushremote" | "description"
        ),
        ("submodule", true) => match key {
            "url" | "active" | "branch" | "fetchrecursesubmodules" | "ignore" | "shallow" => true,
            // `!command` runs it; the named strategies don't.
            "update" => matches!(value.trim(), "checkout" | "rebase" | "merge" | "none"),
            _ => false,
        },
        ("user", false) => matches!(key, "name" | "email"),
        ("init", false) => key == "defaultbranch",
        ("pull", false) => matches!(key, "rebase" | "ff"),
        ("push", false) => matches!(key, "default" | "autosetupremote"),
        ("fetch", false) => matches!(key, "prune" | "prunetags"),
        ("merge", false) => matches!(key, "conflictstyle" | "ff"),
        ("rerere", false) => key == "enabled",
        ("index", false) => key == "version",
        ("gc", false) => matches!(key, "auto" | "autodetach"),
        ("lfs", false) => key == "repositoryformatversion",
        _ => false,
    }
}

/// Parses config text. Lenient: what it can't read it skips (git would refuse the file).
pub fn parse(text: &str) -> Vec<Entry> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = Vec::new();
    let mut section = String::new();
    let mut subsection: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let mut start = line.len() - trimmed.len();
        if trimmed.starts_with('[') {
            match parse_header(&line[start..]) {
                Some((sec, sub, used)) => {
                    section = sec;
                    subsection = sub;
                    start += used;
                }
                None => {
                    i += 1;
                    continue;
                }
            }
        }
        let rest = &line[start..];
        let key_off = rest.len() - rest.trim_start().len();
        let rest = rest.trim_start();
        let key_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-')
            .count();
        if key_len == 0 || section.is_empty() {
            i += 1;
            continue;
        }
        let key = rest[..key_len].to_ascii_lowercase();
        let after = rest[key_len..].trim_start();
        let (value, used_lines) = if let Some(v) = after.strip_prefix('=') {
            parse_value(v, &lines[i + 1..])
        } else {
            (String::new(), 0)
        };
        out.push(Entry {
            section: section.clone(),
            subsection: subsection.clone(),
            key,
            value,
            line: i,
            lines: used_lines + 1,
            column: start + key_off,
        });
        i += used_lines + 1;
    }
    out
}

/// `[section]`, `[section "sub"]` or `[section.sub]`; returns the bytes it used.
fn parse_header(s: &str) -> Option<(String, Option<String>, usize)> {
    let b = s.as_bytes();
    let mut i = 1;
    let name_start = i;
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'-' || b[i] == b'.') {
        i += 1;
    }
    let name = &s[name_start..i];
    let mut sub = None;
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    if i < b.len() && b[i] == b'"' {
        i += 1;
        let mut v = String::new();
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' && i + 1 < b.len() {
                i += 1;
            }
            let ch = s[i..].chars().next()?;
            v.push(ch);
            i += ch.len_utf8();
        }
        if i >= b.len() {
            return None;
        }
        i += 1;
        sub = Some(v);
    }
    if i >= b.len() || b[i] != b']' {
        return None;
    }
    let (sec, sub) = match (sub, name.split_once('.')) {
        (Some(sub), _) => (name.to_ascii_lowercase(), Some(sub)),
        (None, Some((sec, rest))) => (sec.to_ascii_lowercase(), Some(rest.to_ascii_lowercase())),
        (None, None) => (name.to_ascii_lowercase(), None),
    };
    if sec.is_empty() {
        return None;
    }
    Some((sec, sub, i + 1))
}

/// A value: quotes, escapes, comments, and `\` at the end of a line continuing it.
fn parse_value(first: &str, more: &[&str]) -> (String, usize) {
    let mut v = String::new();
    let mut quoted = false;
    let mut used = 0;
    let mut cur = first;
    loop {
        let mut chars = cur.chars().peekable();
        let mut continued = false;
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    None => {
                        continued = true;
                        break;
                    }
                    Some('\r') if chars.peek().is_none() => {
                        continued = true;
                        break;
                    }
                    Some('n') => v.push('\n'),
                    Some('t') => v.push('\t'),
                    Some(o) => v.push(o),
                },
                '"' => quoted = !quoted,
                '#' | ';' if !quoted => break,
                o => v.push(o),
            }
        }
        if !continued || used >= more.len() {
            break;
        }
        cur = more[used];
        used += 1;
    }
    (v.trim().to_string(), used)
}

/// `text` with `entries` commented out (a key after a `[section]` header is cut from its
/// line, the header kept, so later keys stay in their section).
pub fn disable(text: &str, entries: &[Entry]) -> String {
    let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    for e in entries {
        for n in e.line..(e.line + e.lines).min(lines.len()) {
            if n == e.line && e.column > 0 && lines[n][..e.column].contains(']') {
                let (head, tail) = lines[n].split_at(e.column);
                lines[n] = format!("{head}\n# disabled by baton: {tail}");
            } else {
                lines[n] = format!("# disabled by baton: {}", lines[n]);
            }
        }
    }
    lines.join("\n")
}

/// `text` without the entries that hold a credential (see [`holds_credential`]), or `None`
/// when it has none. What a command is shown of the user's own git configs: their settings
/// (identity, aliases, URL rewrites without a user part) stay, the tokens do not — not even
/// in a comment. A section whose header names a URL with a user part goes whole.
pub fn without_credentials(text: &str) -> Option<String> {
    const HIDDEN: &str = "# (a credential: not shown in baton's sandbox)";
    let entries = parse(text);
    if !entries.iter().any(holds_credential) {
        return None;
    }
    let raw: Vec<&str> = text.split('\n').collect();
    let end_of = |e: &Entry| (e.line + e.lines).min(raw.len());
    let mut continuation = vec![false; raw.len()];
    for e in &entries {
        continuation[(e.line + 1).min(end_of(e))..end_of(e)].fill(true);
    }
    let mut shown: Vec<Option<String>> = raw
        .iter()
        .zip(&continuation)
        .map(|(line, continued)| {
            let header = line.trim_start();
            let secret_header = !continued
                && header.starts_with('[')
                && parse_header(header)
                    .is_some_and(|(_, sub, _)| sub.is_some_and(|s| has_user_part(&s)));
            Some(if secret_header { HIDDEN } else { line }.to_string())
        })
        .collect();
    for e in entries.iter().filter(|e| holds_credential(e)) {
        if shown[e.line].as_deref() != Some(HIDDEN) {
            // A key after its `[section]` header on one line: the header stays.
            let head = raw[e.line].get(..e.column).filter(|h| h.contains(']'));
            shown[e.line] = Some(head.map_or(HIDDEN.to_string(), |h| format!("{h} {HIDDEN}")));
        }
        shown[(e.line + 1).min(end_of(e))..end_of(e)].fill(None);
    }
    Some(shown.into_iter().flatten().collect::<Vec<_>>().join("\n"))
}

/// Whether an entry holds a credential: an `http.extraHeader` (an `Authorization:` line), a
/// key named like one (`github.token`, `sendemail.smtpPass`), a URL with a user part in its
/// subsection or value (`url."https://x-access-token:TOKEN@github.com/".insteadOf`,
/// `remote.origin.url`), or an inline credential helper (`!f() { echo password=…; }; f`).
pub fn holds_credential(e: &Entry) -> bool {
    let key = e.key.as_str();
    key == "extraheader"
        || ["token", "password", "passwd", "secret"]
            .iter()
            .any(|w| key.contains(w))
        || key.ends_with("pass")
        || e.subsection.as_deref().is_some_and(has_user_part)
        || has_user_part(&e.value)
        || (e.section == "credential" && key == "helper" && e.value.starts_with('!'))
}

fn has_user_part(url: &str) -> bool {
    crate::sandbox::env::carries_password(std::ffi::OsStr::new(url))
}

/// Asks git itself (`git`, when one was found outside the writable roots) whether `path`
/// still holds code-running entries other than `kept`: a second opinion on this parser, in
/// case git reads the file differently.
pub fn git_sees_new_code(git: Option<&Path>, path: &Path, kept: &[(String, String)]) -> bool {
    let Some(git) = git else { return false };
    // Nothing of baton's environment: a loader variable of the user's naming the workspace
    // (`LD_PRELOAD`, `LD_LIBRARY_PATH`) would load what a command wrote there into this git.
    let out = std::process::Command::new(git)
        .args(["config", "--no-includes", "--null", "--list", "--file"])
        .arg(path)
        .current_dir("/")
        .env_clear()
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CEILING_DIRECTORIES", "/")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let Ok(out) = out else { return false };
    if !out.status.success() {
        return false;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.split('\0').filter(|r| !r.is_empty()).any(|record| {
        let (name, value) = record.split_once('\n').unwrap_or((record, ""));
        let Some((head, key)) = name.rsplit_once('.') else {
            return false;
        };
        let (section, has_sub) = match head.split_once('.') {
            Some((s, _)) => (s, true),
            None => (head, false),
        };
        runs_code(section, has_sub, key, value)
            && !kept.iter().any(|(n, v)| n == name && v == value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_in_every_header_form() {
        let text = "[core]\n\tbare = false\n[core] fsmonitor = /x/y\n[diff \"pdf\"]\n\
                    textconv = \"a \\\n b\"\n[Alias]\n st = status\n ev = !sh -c x\n\
                    [remote.origin]\n uploadpack = z ; comment\n";
        let names: Vec<String> = parse(text)
            .iter()
            .filter(|e| e.runs_code())
            .map(Entry::name)
            .collect();
        assert_eq!(
            names,
            [
                "core.fsmonitor",
                "diff.pdf.textconv",
                // Not only `!` aliases: `st = -c core.pager=X log` runs X too.
                "alias.st",
                "alias.ev",
                "remote.origin.uploadpack"
            ]
        );
        let e = parse(text);
        let tc = e.iter().find(|e| e.key == "textconv").unwrap();
        assert_eq!((tc.value.as_str(), tc.lines), ("a  b", 2));
    }

    /// An allow-list: what `git init`, `git clone` and `git submodule` write is kept,
    /// every other key counts as code, a third party's included (finding 5: git-lfs's
    /// `lfs.extension.*.clean` ran on the user's `git status`).
    #[test]
    fn only_keys_known_to_run_nothing_are_kept() {
        let text = r#"[core]
	repositoryformatversion = 0
	filemode = true
	bare = false
	logallrefupdates = true
	worktree = ../../../lib
[remote "origin"]
	url = https://example.com/x.git
	fetch = +refs/heads/*:refs/remotes/origin/*
[branch "main"]
	remote = origin
	merge = refs/heads/main
[submodule "lib"]
	url = ../lib
	active = true
	update = rebase
[user]
	name = me
	email = me@example.com
[lfs]
	repositoryformatversion = 0
[lfs "extension.x"]
	clean = ./c.sh
	smudge = cat
[lfs "customtransfer.t"]
	path = ./t.sh
[lfs]
	standalonetransferagent = t
[annex]
	freezecontent-command = ./f.sh
[submodule "evil"]
	update = !./u.sh
[core]
	fsmonitor = ./m.sh
"#;
        let names: Vec<String> = parse(text)
            .iter()
            .filter(|e| e.runs_code())
            .map(Entry::name)
            .collect();
        assert_eq!(
            names,
            [
                "lfs.extension.x.clean",
                "lfs.extension.x.smudge",
                "lfs.customtransfer.t.path",
                "lfs.standalonetransferagent",
                "annex.freezecontent-command",
                "submodule.evil.update",
                "core.fsmonitor",
            ]
        );
    }

    #[test]
    fn disabling_keeps_the_header_and_later_keys_in_their_section() {
        let text = "[alias]\n\tx = log\n[core] fsmonitor = /evil\n\tbare = false\n";
        let bad: Vec<Entry> = parse(text).into_iter().filter(Entry::runs_code).collect();
        let fixed = disable(text, &bad);
        let after = parse(&fixed);
        assert!(after.iter().all(|e| !e.runs_code()), "{fixed}");
        assert!(after.iter().any(|e| e.name() == "core.bare"), "{fixed}");
    }

    #[test]
    fn credentials_leave_the_shown_copy_and_every_other_setting_stays() {
        let text = "[user]\n\tname = Visible Identity\n\
                    [url \"https://x-access-token:TOKEN1@github.com/\"]\n\tinsteadOf = https://github.com/\n\
                    [url \"git@github.com:\"]\n\tpushInsteadOf = https://github.com/\n\
                    [http \"https://example.com/\"]\n\textraHeader = \"AUTHORIZATION: basic \\\n\tTOKEN2\"\n\
                    [http] extraheader = Authorization: Bearer TOKEN3\n\tsslVerify = true\n\
                    [credential]\n\thelper = \"!f() { echo password=TOKEN4; }; f\"\n\thelper = cache\n\
                    [github]\n\ttoken = TOKEN5\n[sendemail]\n\tsmtpPass = TOKEN6\n\
                    [remote \"origin\"]\n\turl = https://me:TOKEN7@git.example/x.git\n\
                    [url \"https://oauth2:TOKEN8@gitlab.com/\"] insteadOf = https://gitlab.com/\n\
                    [alias]\n\tst = status\n";
        let shown = without_credentials(text).expect("credentials found");
        assert!(!shown.contains("TOKEN"), "{shown}");
        let names: Vec<String> = parse(&shown).iter().map(Entry::name).collect();
        assert_eq!(
            names,
            [
                "user.name",
                "url.git@github.com:.pushinsteadof",
                "http.sslverify",
                "credential.helper",
                "alias.st",
            ],
            "{shown}"
        );
        assert!(without_credentials("[user]\n\tname = x\n[alias]\n\tco = checkout\n").is_none());
        // Broken files (git would refuse them) neither panic nor keep a token.
        for broken in [
            "[http] extraheader = \"TOKEN \\",
            "[http] extraheader = TOKEN \\\n",
            "[url \"https://a:TOKEN@h/\"",
            "[url \"https://a:TOKEN@h/\"]",
            "\n\n[github]token=TOKEN",
            "[http]\r\n\textraHeader = TOKEN\r\n",
        ] {
            let shown = without_credentials(broken).unwrap_or_default();
            assert!(
                !shown.contains("TOKEN") || !parse(broken).iter().any(holds_credential),
                "{broken:?} -> {shown:?}"
            );
        }
    }
}
