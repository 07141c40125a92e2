//! A command line as the approval rules see it: tree-sitter-bash parses it and every simple
//! command it would run — in pipelines, lists, subshells, command and process substitutions,
//! and the pipeline a here-doc feeds — comes out as its words. A line whose meaning depends on
//! anything the rules cannot see (a parse error, a variable assignment, control flow, a
//! function, a `${…}` or `$((…))` expansion, a variable or substitution as a command name) is
//! refused as a whole, and so is any redirection that writes a file or reads one bash opens as
//! a network connection (`< /dev/tcp/…`).

use tree_sitter::{Node, Parser};

/// One word of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    /// Known before the shell runs: quotes removed, escapes resolved.
    Literal(String),
    /// Decided by the shell when it runs (a `$var`, a glob, a substitution): its value — and
    /// so whether it is an option — is unknown. Holds the source text, for messages.
    Dynamic(String),
}

impl Word {
    pub fn literal(&self) -> Option<&str> {
        match self {
            Word::Literal(s) => Some(s),
            Word::Dynamic(_) => None,
        }
    }
}

/// A simple command: its words (the first is the program) and whether its output goes
/// somewhere other than the terminal (a pipe or `/dev/null`), which keeps pagers from starting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    pub words: Vec<Word>,
    pub output_redirected: bool,
}

impl SimpleCommand {
    /// The program's name when it is literal.
    pub fn program(&self) -> Option<&str> {
        self.words.first().and_then(Word::literal)
    }

    /// All words, when every one of them is literal.
    pub fn literal_argv(&self) -> Option<Vec<String>> {
        self.words
            .iter()
            .map(|w| w.literal().map(str::to_string))
            .collect()
    }
}

/// Every simple command `line` would run, or `None` when the line cannot be judged from its
/// words (see the module docs) or writes a file through a redirection.
pub fn simple_commands(line: &str) -> Option<Vec<SimpleCommand>> {
    if !continuations_read_alike(line) {
        return None;
    }
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .ok()?;
    let tree = parser.parse(line, None)?;
    let root = tree.root_node();
    if root.has_error()
        || root.is_missing()
        || too_big_to_judge(root, MAX_DEPTH)
        || !read_as_bash_reads(root, line.as_bytes())
    {
        return None;
    }
    let mut walk = Walk {
        src: line.as_bytes(),
        out: Vec::new(),
    };
    walk.statement(root, false)?;
    Some(walk.out)
}

/// How deep a line's tree may nest to be judged. The walks below recurse once per level, and
/// a line nesting `$(` thousands deep (or a `&&` list thousands long, which the grammar nests
/// to the left) would take the stack of the thread judging it, and baton with it. Deeper, the
/// line cannot be judged from its words: it needs approval like any such line.
const MAX_DEPTH: usize = 200;

/// How many nodes a line's tree may have to be judged: the rules' walks are cheap per node,
/// but a line of 30,000 `! ` (60 KB) is as many nodes, and judging it must not keep baton
/// busy for minutes. Beyond, the line needs approval.
const MAX_NODES: usize = 20_000;

/// Whether the tree below `root` is more than `limit` levels deep or has more than
/// [`MAX_NODES`] nodes, found without recursion.
fn too_big_to_judge(root: Node<'_>, limit: usize) -> bool {
    let mut cursor = root.walk();
    let mut depth = 0usize;
    let mut nodes = 0usize;
    loop {
        if cursor.goto_first_child() {
            depth += 1;
            nodes += 1;
            if depth > limit || nodes > MAX_NODES {
                return true;
            }
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                return false;
            }
            depth -= 1;
        }
        nodes += 1;
        if nodes > MAX_NODES {
            return true;
        }
    }
}

struct Walk<'s> {
    src: &'s [u8],
    out: Vec<SimpleCommand>,
}

fn named_children<'t>(node: Node<'t>) -> Vec<Node<'t>> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor).collect()
}

fn all_children<'t>(node: Node<'t>) -> Vec<Node<'t>> {
    let mut cursor = node.walk();
    node.children(&mut cursor).collect()
}

impl Walk<'_> {
    fn text(&self, node: Node<'_>) -> &str {
        node.utf8_text(self.src).unwrap_or("")
    }

    /// A statement and everything below it; `redirected`: its output is not the terminal.
    fn statement(&mut self, node: Node<'_>, redirected: bool) -> Option<()> {
        match node.kind() {
            "comment" => Some(()),
            "program" | "list" | "subshell" | "compound_statement" => {
                for child in named_children(node) {
                    self.statement(child, redirected)?;
                }
                Some(())
            }
            "negated_command" => {
                for child in named_children(node) {
                    self.statement(child, redirected)?;
                }
                Some(())
            }
            "pipeline" => {
                let parts: Vec<Node<'_>> = named_children(node)
                    .into_iter()
                    .filter(|c| c.kind() != "comment")
                    .collect();
                let last = parts.len().saturating_sub(1);
                for (i, part) in parts.into_iter().enumerate() {
                    self.statement(part, redirected || i < last)?;
                }
                Some(())
            }
            "redirected_statement" => {
                let mut to_null = false;
                let mut cursor = node.walk();
                for r in node.children_by_field_name("redirect", &mut cursor) {
                    to_null |= self.redirect(r)?;
                }
                // `> file` with no command still creates the file.
                let body = node.child_by_field_name("body")?;
                // Here-strings are children outside the `redirect` field.
                for child in named_children(node) {
                    if child.kind() == "herestring_redirect" {
                        self.redirect(child)?;
                    }
                }
                self.statement(body, redirected || to_null)
            }
            "command" => self.command(node, redirected),
            // Control flow, functions, assignments, `[[ … ]]`, `declare`/`export`/`unset`:
            // what runs depends on values the rules cannot know.
            _ => None,
        }
    }

    fn command(&mut self, node: Node<'_>, redirected: bool) -> Option<()> {
        let mut words = Vec::new();
        let mut to_null = false;
        for (child, field) in children_with_fields(node) {
            if !child.is_named() {
                continue;
            }
            match field {
                Some("name") => {
                    let name = self.command_name(child)?;
                    words.insert(0, name);
                }
                Some("argument") => words.push(self.word(child)?),
                Some("redirect") => to_null |= self.redirect(child)?,
                _ if child.kind() == "comment" => {}
                // `NAME=value cmd` changes how cmd behaves (PAGER, LD_PRELOAD, GIT_*), and a
                // bare subshell child is not a command the rules know.
                _ => return None,
            }
        }
        words.first().and_then(Word::literal)?;
        self.out.push(SimpleCommand {
            words,
            output_redirected: redirected || to_null,
        });
        Some(())
    }

    fn command_name(&mut self, node: Node<'_>) -> Option<Word> {
        let inner = named_children(node);
        let [word] = inner.as_slice() else {
            return None;
        };
        match self.word(*word)? {
            Word::Literal(name) if !name.is_empty() => Some(Word::Literal(name)),
            // `$cmd args`, `$(pick) args`, `*`: the program is unknown.
            _ => None,
        }
    }

    /// One word; the commands inside substitutions are judged too.
    fn word(&mut self, node: Node<'_>) -> Option<Word> {
        let text = self.text(node).to_string();
        match node.kind() {
            // tree-sitter reads `1#$(cmd)` as a number (bash's BASE#DIGITS) holding the
            // substitution: a word with parts inside is not one word.
            "word" | "number" if node.named_child_count() > 0 => None,
            "word" | "number" => Some(unquoted(&text)),
            "raw_string" => Some(Word::Literal(
                text.strip_prefix('\'')?.strip_suffix('\'')?.to_string(),
            )),
            "string" => {
                let mut dynamic = false;
                for child in named_children(node) {
                    match child.kind() {
                        "string_content" => {}
                        _ => {
                            self.word(child)?;
                            dynamic = true;
                        }
                    }
                }
                if dynamic {
                    return Some(Word::Dynamic(text));
                }
                let inner = text.strip_prefix('"')?.strip_suffix('"')?;
                Some(Word::Literal(unescape_double_quoted(inner)))
            }
            "concatenation" => {
                let mut joined = String::new();
                let mut dynamic = false;
                for child in named_children(node) {
                    match self.word(child)? {
                        Word::Literal(s) => joined.push_str(&s),
                        Word::Dynamic(_) => dynamic = true,
                    }
                }
                Some(if dynamic {
                    Word::Dynamic(text)
                } else {
                    Word::Literal(joined)
                })
            }
            "simple_expansion" => Some(Word::Dynamic(text)),
            // Inside backticks bash first turns `\``, `\$` and `\\` into what they escape and
            // parses the result again: `echo \`id\`` there runs `id`, where tree-sitter sees
            // an `echo` of literal words.
            "command_substitution" if text.starts_with('`') && text.contains('\\') => None,
            "command_substitution" => {
                for child in named_children(node) {
                    if child.kind() == "file_redirect" {
                        // `$(< file)` reads the file.
                        self.redirect(child)?;
                    } else {
                        self.statement(child, true)?;
                    }
                }
                Some(Word::Dynamic(text))
            }
            "process_substitution" => {
                // `<(cmd)` and `>(cmd)`: cmd runs, with its output (or input) a pipe.
                for child in named_children(node) {
                    self.statement(child, true)?;
                }
                Some(Word::Dynamic(text))
            }
            "brace_expression" | "extglob_pattern" | "regex" => Some(Word::Dynamic(text)),
            // `${…}` (whose operators assign, and `@P` runs substitutions held in a value),
            // `$((…))` (array subscripts in it run substitutions), `$'…'`, `$"…"`.
            _ => None,
        }
    }

    /// Judges one redirection: `Some(true)` when it sends the output to `/dev/null`,
    /// `Some(false)` when it only reads or duplicates a descriptor, `None` when it writes a
    /// file (or cannot be judged).
    fn redirect(&mut self, node: Node<'_>) -> Option<bool> {
        match node.kind() {
            "file_redirect" => {
                let op = all_children(node)
                    .into_iter()
                    .find(|c| !c.is_named())
                    .map(|c| self.text(c).to_string())?;
                let mut cursor = node.walk();
                let dest: Vec<Node<'_>> = node
                    .children_by_field_name("destination", &mut cursor)
                    .collect();
                let mut words = Vec::new();
                for d in dest {
                    words.push(self.word(d)?);
                }
                let fd_of = |w: &[Word]| match w {
                    [Word::Literal(s)] => s == "-" || s.chars().all(|c| c.is_ascii_digit()),
                    _ => false,
                };
                let null = matches!(words.as_slice(), [Word::Literal(s)] if s == "/dev/null");
                // bash opens `/dev/tcp/HOST/PORT` and `/dev/udp/…` itself: such a "file" is a
                // connection, and a word only known when it runs could name one.
                let from_file = match words.as_slice() {
                    [Word::Literal(s)] => {
                        !s.starts_with("/dev/tcp/") && !s.starts_with("/dev/udp/")
                    }
                    _ => false,
                };
                match op.as_str() {
                    "<" if from_file => Some(false),
                    "<&" | ">&" if fd_of(&words) => Some(false),
                    "<&-" | ">&-" => Some(false),
                    ">" | ">>" | "&>" | "&>>" | ">|" | ">&" if null => {
                        let descriptor = node
                            .child_by_field_name("descriptor")
                            .map(|d| self.text(d).to_string());
                        // Only stdout going to /dev/null keeps a pager away.
                        Some(matches!(descriptor.as_deref(), None | Some("1")))
                    }
                    _ => None,
                }
            }
            "herestring_redirect" => {
                for child in named_children(node) {
                    if child.kind() != "file_descriptor" {
                        self.word(child)?;
                    }
                }
                Some(false)
            }
            "heredoc_redirect" => {
                self.heredoc_ends_where_bash_ends_it(node)?;
                let mut to_null = false;
                for (child, field) in children_with_fields(node) {
                    if !child.is_named() {
                        continue;
                    }
                    match child.kind() {
                        "heredoc_start" | "heredoc_end" | "file_descriptor" => {}
                        "heredoc_body" => {
                            for part in named_children(child) {
                                match part.kind() {
                                    "heredoc_content" | "heredoc_end" => {}
                                    _ => {
                                        self.word(part)?;
                                    }
                                }
                            }
                        }
                        "file_redirect" | "herestring_redirect" => {
                            to_null |= self.redirect(child)?;
                        }
                        // `cat <<EOF | sh`, `cat <<EOF && rm x`: the rest of the line.
                        _ if field == Some("right") || child.kind() == "pipeline" => {
                            self.statement(child, false)?;
                        }
                        // Arguments written after the here-doc's marker belong to the command;
                        // not worth supporting.
                        _ => return None,
                    }
                }
                Some(to_null)
            }
            _ => None,
        }
    }

    /// Checks that bash ends this here-doc on the line tree-sitter ends it. tree-sitter ends
    /// one at a line that merely starts with its delimiter (` EOF`), and drops what is glued
    /// to a quoted delimiter (`"EOF"x`, whose delimiter is `EOFx` to bash): the lines bash
    /// still reads as text would then be commands to the rules, a second here-doc among them
    /// whose body hides what bash runs once its own here-doc ends.
    fn heredoc_ends_where_bash_ends_it(&self, node: Node<'_>) -> Option<()> {
        let children = all_children(node);
        let strip_tabs = children.iter().any(|c| self.text(*c) == "<<-");
        let start = children.iter().find(|c| c.kind() == "heredoc_start")?;
        let glued = self.src.get(start.end_byte()).copied();
        if glued.is_some_and(|b| !b" \t\n;&|)<>".contains(&b)) {
            return None;
        }
        let delimiter = heredoc_delimiter(self.text(*start))?;
        let body = children.iter().find(|c| c.kind() == "heredoc_body");
        let end = children
            .iter()
            .chain(body.map(|b| named_children(*b)).unwrap_or_default().iter())
            .find(|c| c.kind() == "heredoc_end")
            .copied()?;
        let line_start = self.src[..end.start_byte()]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let line_end = self.src[end.start_byte()..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(self.src.len(), |i| end.start_byte() + i);
        let is_delimiter = |line: &[u8]| {
            let line = match strip_tabs {
                true => &line[line.iter().take_while(|&&b| b == b'\t').count()..],
                false => line,
            };
            line == delimiter.as_bytes()
        };
        if !is_delimiter(&self.src[line_start..line_end]) {
            return None;
        }
        // In a here-doc bash joins a line ending in a backslash to the next one, also where
        // the next one looks like the end.
        if self.src[body.map_or(line_start, |b| b.start_byte())..line_start]
            .windows(2)
            .any(|w| w == b"\\\n")
        {
            return None;
        }
        // Bash stops at the first line that is the delimiter: none may come before the end.
        let mut body_start = body.map_or(line_start, |b| b.start_byte());
        while strip_tabs && body_start > 0 && self.src[body_start - 1] == b'\t' {
            body_start -= 1;
        }
        if body_start > line_start || (body_start > 0 && self.src[body_start - 1] != b'\n') {
            return None;
        }
        match self.src[body_start..line_start]
            .split(|&b| b == b'\n')
            .any(is_delimiter)
        {
            true => None,
            false => Some(()),
        }
    }
}

/// Whether bash and tree-sitter join the lines of `line` alike. bash removes every
/// backslash-newline before it reads words, so `a\⏎#; cmd` is `a#; cmd` to it (no comment)
/// and `$\⏎{…}` an expansion, where tree-sitter reads a comment or a lone `$`; and to bash
/// `\␍⏎` is an escaped carriage return and the end of the command, to tree-sitter a line
/// continuation. So a carriage return refuses the line, and a continuation is taken only
/// after a plain blank (`cmd \⏎  --flag`), where both read a word boundary.
fn continuations_read_alike(line: &str) -> bool {
    let b = line.as_bytes();
    // tree-sitter takes vertical tab, form feed and carriage return for blanks, bash for
    // parts of a word: `echo \x0c#…` is a comment to one and not to the other.
    !line
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
        && (0..b.len()).all(|i| {
            b[i] != b'\\'
                || b.get(i + 1) != Some(&b'\n')
                || (i >= 1 && matches!(b[i - 1], b' ' | b'\t') && (i < 2 || b[i - 2] != b'\\'))
        })
}

/// Whether tree-sitter's tree splits `src` where bash does. tree-sitter-bash is not bash's
/// lexer: it starts a comment after an escaped blank (`a\ #; cmd`), lets a word or a `$`
/// run on over a newline (`$⏎cmd`, `⏎\cmd`, `<<<\ ⏎cmd`), keeps a blank inside a
/// redirection's word (`<} ]#;cmd`) and takes `=~` outside `[[ … ]]` for an operator that
/// joins lines. Each
/// made a command bash runs invisible to the rules, so such a tree is refused: a comment must
/// start where bash starts one, no word may hold an unescaped blank or newline, and the parts
/// of a simple command or a redirection may be apart by blanks only.
fn read_as_bash_reads(node: Node<'_>, src: &[u8]) -> bool {
    let escaped = |at: usize| src[..at].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1;
    let text = &src[node.start_byte()..node.end_byte()];
    let ok = match node.kind() {
        "comment" => match node.start_byte().checked_sub(1) {
            None => true,
            Some(i) => match src[i] {
                b'\n' | b';' | b'&' | b'|' | b'(' | b')' => true,
                b' ' | b'\t' => !escaped(i),
                _ => false,
            },
        },
        "word" => text
            .iter()
            .enumerate()
            .all(|(i, b)| !matches!(b, b' ' | b'\t' | b'\n') || escaped(node.start_byte() + i)),
        "simple_expansion" | "variable_name" | "special_variable_name" => {
            !text.iter().any(|b| matches!(b, b' ' | b'\t' | b'\n'))
        }
        // Bash glues a word's parts with nothing between them (tree-sitter let an empty
        // backtick pair, "``", swallow the newline after it).
        "concatenation" => {
            let children = all_children(node);
            children.iter().all(|c| c.is_named())
                && children
                    .windows(2)
                    .all(|w| w[0].end_byte() == w[1].start_byte())
        }
        "command" | "file_redirect" | "herestring_redirect" => {
            let fields = children_with_fields(node);
            let children: Vec<Node<'_>> = fields.iter().map(|(c, _)| *c).collect();
            fields
                .iter()
                .all(|(c, field)| c.is_named() || *field != Some("argument"))
                && children.windows(2).all(|w| {
                    let gap = &src[w[0].end_byte()..w[1].start_byte()];
                    gap.iter()
                        .all(|b| matches!(b, b' ' | b'\t' | b'\\' | b'\n'))
                        && !gap
                            .iter()
                            .enumerate()
                            .any(|(i, b)| *b == b'\n' && (i == 0 || gap[i - 1] != b'\\'))
                })
        }
        _ => true,
    };
    ok && all_children(node)
        .into_iter()
        .all(|c| read_as_bash_reads(c, src))
}

/// A here-doc's delimiter as bash reads it: the word with its quotes removed (bash expands
/// nothing in it; a `$` or backtick is refused rather than guessed at).
fn heredoc_delimiter(word: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        match c {
            '$' | '`' => return None,
            '\\' => out.push(chars.next()?),
            '\'' => loop {
                match chars.next()? {
                    '\'' => break,
                    c => out.push(c),
                }
            },
            '"' => loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => {
                        let n = chars.next()?;
                        if !matches!(n, '"' | '\\') {
                            out.push('\\');
                        }
                        out.push(n);
                    }
                    c => out.push(c),
                }
            },
            c => out.push(c),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The field name under which `child` hangs from `parent`.
/// Every child of `node` with the field it fills, in one pass (looking a child's field up
/// among its siblings, child by child, is quadratic on a node with thousands of children).
fn children_with_fields<'t>(node: Node<'t>) -> Vec<(Node<'t>, Option<&'static str>)> {
    let mut out = Vec::new();
    let mut cursor = node.walk();
    if cursor.goto_first_child() {
        loop {
            out.push((cursor.node(), cursor.field_name()));
            if !cursor.goto_next_sibling() {
                break;
            }
        }
    }
    out
}

/// An unquoted word: escapes resolved; globs, braces and a leading `~` make it dynamic (the
/// shell turns `*` into file names the command may take for options).
fn unquoted(text: &str) -> Word {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(n) => out.push(n),
            },
            '*' | '?' | '[' | '{' | '$' | '`' => return Word::Dynamic(text.to_string()),
            '~' if out.is_empty() => return Word::Dynamic(text.to_string()),
            _ => out.push(c),
        }
    }
    Word::Literal(out)
}

fn unescape_double_quoted(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&n) = chars.peek()
            && matches!(n, '"' | '\\' | '$' | '`' | '\n')
        {
            chars.next();
            if n != '\n' {
                out.push(n);
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argvs(line: &str) -> Option<Vec<Vec<String>>> {
        simple_commands(line).map(|cmds| {
            cmds.iter()
                .map(|c| {
                    c.words
                        .iter()
                        .map(|w| match w {
                            Word::Literal(s) => s.clone(),
                            Word::Dynamic(s) => format!("<{s}>"),
                        })
                        .collect()
                })
                .collect()
        })
    }

    fn v(words: &[&[&str]]) -> Option<Vec<Vec<String>>> {
        Some(
            words
                .iter()
                .map(|c| c.iter().map(|w| w.to_string()).collect())
                .collect(),
        )
    }

    #[test]
    fn every_simple_command_is_found() {
        assert_eq!(argvs("ls -la"), v(&[&["ls", "-la"]]));
        assert_eq!(
            argvs("cat a | grep -n 'x y' && wc -l \"b c\"; echo \\$HOME"),
            v(&[
                &["cat", "a"],
                &["grep", "-n", "x y"],
                &["wc", "-l", "b c"],
                &["echo", "$HOME"]
            ])
        );
        assert_eq!(
            argvs("(cd sub && ls) || { pwd; }"),
            v(&[&["cd", "sub"], &["ls"], &["pwd"]])
        );
        assert_eq!(
            argvs("echo $(rm -rf x) `id`"),
            v(&[
                &["rm", "-rf", "x"],
                &["id"],
                &["echo", "<$(rm -rf x)>", "<`id`>"]
            ])
        );
        assert_eq!(
            argvs("diff <(ls a) <(sh -c x)"),
            v(&[
                &["ls", "a"],
                &["sh", "-c", "x"],
                &["diff", "<<(ls a)>", "<<(sh -c x)>"]
            ])
        );
        assert_eq!(
            argvs("cat <<EOF | sh\nrm x\nEOF\n"),
            v(&[&["sh"], &["cat"]])
        );
        assert_eq!(
            argvs("cat <<'EOF'\nx\nEOF\ncat <<-\"E F\"\n\tx\n\tE F\nls"),
            v(&[&["cat"], &["cat"], &["ls"]])
        );
        assert_eq!(
            argvs("ls \\\n  -la \\\n\t*.rs"),
            v(&[&["ls", "-la", "<*.rs>"]])
        );
        assert_eq!(argvs("ls *.rs"), v(&[&["ls", "<*.rs>"]]));
        assert_eq!(argvs("'git' \"status\""), v(&[&["git", "status"]]));
        assert_eq!(argvs("ls 2>&1 > /dev/null < in"), v(&[&["ls"]]));
        let piped = simple_commands("git log | head").unwrap();
        assert!(piped[0].output_redirected && !piped[1].output_redirected);
        assert!(simple_commands("git log > /dev/null").unwrap()[0].output_redirected);
        assert!(!simple_commands("git log 2> /dev/null").unwrap()[0].output_redirected);
    }

    #[test]
    fn what_cannot_be_judged_from_words_is_refused() {
        for line in [
            "echo hi > out",
            "echo hi >> out",
            "ls &> out",
            "ls >& out",
            "> out",
            "FOO=1 ls",
            "x=1; ls",
            "$cmd -la",
            "$(which rm) x",
            "*",
            "echo ${x@P}",
            "echo $((a[$(id)]))",
            "for f in *; do rm $f; done",
            "if true; then ls; fi",
            "f() { ls; }; f",
            "export PAGER=sh",
            "cat 'unterminated",
            "echo $'\\x41'",
            "[[ -f x ]]",
            "cat < /dev/tcp/127.0.0.1/80",
            "cat < $f",
            "echo a\\\n#; rm x",
            "echo $\\\n{x:='$(rm x)'} $\\\n{x@P}",
            "echo a \\\r\nrm x",
            "cat <<EOF\nx \\\nEOF\nrm x\nEOF\n",
            "cat <<EOF > out\nx\nEOF\n",
            // Ends where bash does not: ` EOF`, `EOF ` or a glued quote (`"EOF"x` is `EOFx`).
            "cat <<EOF\n EOF\ncat <<'Z'\nEOF\nrm x\nZ\n",
            "cat <<EOF\nEOF \nEOF\n",
            "cat <<EOF\r\nx\r\nEOF\r\n",
            "echo `echo \\`rm x\\``",
        ] {
            assert_eq!(argvs(line), None, "{line:?}");
        }
    }

    #[test]
    fn a_line_nested_too_deep_to_judge_is_refused_without_taking_the_stack() {
        // Twenty-fourth red team (critical): `$(` nested 3,000 deep, or 5,000 `&&` links,
        // overflowed the stack of the thread judging the line and killed baton, and with it
        // the audit of a command still running.
        let nested = format!("echo {}true{}", "$(".repeat(3000), ")".repeat(3000));
        let chained = vec!["true"; 5000].join(" && ");
        // Twenty-fifth red team: 30,000 `! ` kept baton busy for 90 s before the command ran.
        let wide = "! ".repeat(30_000) + "true";
        let shallow = format!("echo {}true{}", "$(echo ".repeat(20), ")".repeat(20));
        std::thread::Builder::new()
            .stack_size(512 << 10)
            .spawn(move || {
                assert_eq!(simple_commands(&nested), None);
                assert_eq!(simple_commands(&chained), None);
                let started = std::time::Instant::now();
                assert_eq!(simple_commands(&wide), None);
                eprintln!("30,000 `! ` judged in {:?}", started.elapsed());
                assert_eq!(simple_commands(&shallow).map(|c| c.len()), Some(21));
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
