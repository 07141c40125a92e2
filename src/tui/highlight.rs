//! Syntax highlighting of code blocks. `tree-sitter-highlight` is not a dependency, so for the
//! seven grammars we ship (Rust, Python, JavaScript, TypeScript, Go, C, C++) this runs each
//! grammar's own `highlights.scm` query with a plain `QueryCursor` and paints the captures; every
//! other language (shell, TOML, JSON, YAML, …) gets a small keyword/string/comment/number
//! highlighter. The parse is cached by the cell that owns the code (finished cells lay out once).

use std::sync::OnceLock;

use ratatui::style::{Color, Style};
use ratatui::text::Span;
use tree_sitter::{Language, Parser, Query, QueryCursor, StreamingIterator};

use super::theme::Palette;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Plain,
    Keyword,
    String,
    Comment,
    Function,
    Type,
    Number,
    Constant,
    Variable,
    Operator,
    Attribute,
}

impl Kind {
    fn color(self, p: &Palette) -> Color {
        match self {
            Kind::Plain => p.fg,
            Kind::Keyword => p.syntax_keyword,
            Kind::String => p.syntax_string,
            Kind::Comment => p.syntax_comment,
            Kind::Function => p.syntax_function,
            Kind::Type => p.syntax_type,
            Kind::Number => p.syntax_number,
            Kind::Constant => p.syntax_constant,
            Kind::Variable => p.syntax_variable,
            Kind::Operator => p.syntax_operator,
            Kind::Attribute => p.syntax_attribute,
        }
    }

    /// Maps a tree-sitter capture name (`keyword.control`, `string.special`, …) to a colour slot.
    fn from_capture(name: &str) -> Kind {
        let head = name.split('.').next().unwrap_or(name);
        match head {
            "keyword" | "conditional" | "repeat" | "include" | "storageclass" => Kind::Keyword,
            "string" | "escape" | "character" => Kind::String,
            "comment" => Kind::Comment,
            "function" | "method" | "constructor" => Kind::Function,
            "type" | "tag" | "module" | "namespace" => Kind::Type,
            "number" | "float" => Kind::Number,
            "constant" | "boolean" | "label" => Kind::Constant,
            "variable" | "property" | "field" | "parameter" => Kind::Variable,
            "operator" | "punctuation" => Kind::Operator,
            "attribute" => Kind::Attribute,
            _ => Kind::Plain,
        }
    }
}

struct Grammar {
    language: Language,
    query: Option<Query>,
}

fn grammar(lang: &str) -> Option<&'static Grammar> {
    macro_rules! cached {
        ($lang:expr, $query:expr) => {{
            static CELL: OnceLock<Grammar> = OnceLock::new();
            Some(CELL.get_or_init(|| {
                let language: Language = $lang.into();
                // A query that does not compile against this grammar version falls back to the
                // keyword highlighter rather than failing the render.
                let query = Query::new(&language, &$query).ok();
                Grammar { language, query }
            }))
        }};
    }
    match lang {
        "rust" | "rs" => cached!(
            tree_sitter_rust::LANGUAGE,
            tree_sitter_rust::HIGHLIGHTS_QUERY
        ),
        "python" | "py" => cached!(
            tree_sitter_python::LANGUAGE,
            tree_sitter_python::HIGHLIGHTS_QUERY
        ),
        "javascript" | "js" | "jsx" | "mjs" => {
            cached!(
                tree_sitter_javascript::LANGUAGE,
                tree_sitter_javascript::HIGHLIGHT_QUERY
            )
        }
        "typescript" | "ts" | "tsx" => cached!(
            tree_sitter_typescript::LANGUAGE_TSX,
            format!(
                "{}\n{}",
                tree_sitter_javascript::HIGHLIGHT_QUERY,
                tree_sitter_typescript::HIGHLIGHTS_QUERY
            )
        ),
        "go" | "golang" => cached!(tree_sitter_go::LANGUAGE, tree_sitter_go::HIGHLIGHTS_QUERY),
        "c" | "h" => cached!(tree_sitter_c::LANGUAGE, tree_sitter_c::HIGHLIGHT_QUERY),
        "cpp" | "c++" | "cc" | "cxx" | "hpp" => cached!(
            tree_sitter_cpp::LANGUAGE,
            format!(
                "{}\n{}",
                tree_sitter_c::HIGHLIGHT_QUERY,
                tree_sitter_cpp::HIGHLIGHT_QUERY
            )
        ),
        _ => None,
    }
}

/// Compiles every grammar's highlight query (a few milliseconds each in release builds) so the
/// first code block of a session does not pay for it; the event loop calls this on a thread.
pub fn warm_up() {
    for lang in ["rust", "python", "js", "ts", "go", "c", "cpp"] {
        let _ = grammar(lang);
    }
}

/// Highlights `code` in language `lang` (the fence info string); one span list per source line.
pub fn highlight(lang: &str, code: &str, palette: &Palette) -> Vec<Vec<Span<'static>>> {
    let lang = lang
        .split([' ', ',', '{'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let kinds = grammar(&lang)
        .and_then(|g| tree_sitter_kinds(g, code))
        .unwrap_or_else(|| keyword_kinds(&lang, code));
    paint(code, &kinds, palette)
}

/// One `Kind` per byte of `code`, from the grammar's highlight query.
fn tree_sitter_kinds(grammar: &Grammar, code: &str) -> Option<Vec<Kind>> {
    let query = grammar.query.as_ref()?;
    let mut parser = Parser::new();
    parser.set_language(&grammar.language).ok()?;
    let tree = parser.parse(code, None)?;
    let mut kinds = vec![Kind::Plain; code.len()];
    let names = query.capture_names();
    let mut cursor = QueryCursor::new();
    let mut captures = cursor.captures(query, tree.root_node(), code.as_bytes());
    // Earlier patterns in highlights.scm are the more specific ones: the first capture to claim a
    // byte keeps it (tree-sitter-highlight's rule).
    let mut claimed = vec![false; code.len()];
    while let Some((m, index)) = captures.next() {
        let capture = m.captures[*index];
        let kind = Kind::from_capture(names[capture.index as usize]);
        let range = capture.node.byte_range();
        for b in range.start.min(code.len())..range.end.min(code.len()) {
            if !claimed[b] {
                claimed[b] = true;
                kinds[b] = kind;
            }
        }
    }
    Some(kinds)
}

const SHELL_KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "do", "done", "case", "esac", "in",
    "function", "return", "export", "local", "echo", "cd", "exit", "set", "unset",
];
const GENERIC_KEYWORDS: &[&str] = &[
    "true",
    "false",
    "null",
    "nil",
    "none",
    "None",
    "True",
    "False",
    "let",
    "const",
    "var",
    "fn",
    "func",
    "def",
    "class",
    "struct",
    "enum",
    "impl",
    "return",
    "if",
    "else",
    "for",
    "while",
    "import",
    "from",
    "package",
    "public",
    "private",
    "static",
    "void",
    "int",
    "new",
    "match",
    "use",
    "pub",
    "mod",
    "type",
    "interface",
    "select",
    "where",
    "and",
    "or",
    "not",
];

/// Keyword/string/comment/number colouring for languages without a grammar.
fn keyword_kinds(lang: &str, code: &str) -> Vec<Kind> {
    let hash_comments = matches!(
        lang,
        "sh" | "bash"
            | "zsh"
            | "shell"
            | "console"
            | "toml"
            | "yaml"
            | "yml"
            | "ruby"
            | "rb"
            | "make"
            | "makefile"
            | "dockerfile"
            | "ini"
            | "conf"
            | "python"
            | "py"
            | "perl"
            | "r"
    );
    let slash_comments = !matches!(
        lang,
        "sh" | "bash" | "zsh" | "shell" | "console" | "toml" | "yaml" | "yml" | "ini"
    );
    let keywords: &[&str] = if matches!(lang, "sh" | "bash" | "zsh" | "shell" | "console") {
        SHELL_KEYWORDS
    } else {
        GENERIC_KEYWORDS
    };
    let bytes = code.as_bytes();
    let mut kinds = vec![Kind::Plain; bytes.len()];
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let rest = &bytes[i..];
        let comment_start = (hash_comments && b == b'#')
            || (slash_comments && rest.starts_with(b"//"))
            || (lang == "sql" && rest.starts_with(b"--"));
        if comment_start {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(bytes.len(), |p| i + p);
            kinds[i..end].fill(Kind::Comment);
            i = end;
        } else if b == b'"' || b == b'\'' || b == b'`' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b && bytes[j] != b'\n' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(bytes.len());
            kinds[i..end].fill(Kind::String);
            i = end;
        } else if b.is_ascii_digit() && (i == 0 || !is_word_byte(bytes[i - 1])) {
            let end = rest
                .iter()
                .position(|&c| !(c.is_ascii_alphanumeric() || c == b'.' || c == b'_'))
                .map_or(bytes.len(), |p| i + p);
            kinds[i..end].fill(Kind::Number);
            i = end;
        } else if is_word_byte(b) {
            let end = rest
                .iter()
                .position(|&c| !is_word_byte(c))
                .map_or(bytes.len(), |p| i + p);
            let word = &code[i..end];
            if keywords.contains(&word) {
                kinds[i..end].fill(Kind::Keyword);
            } else if end < bytes.len() && bytes[end] == b'(' {
                kinds[i..end].fill(Kind::Function);
            } else if lang == "toml"
                && code[..i]
                    .rsplit('\n')
                    .next()
                    .is_some_and(|l| l.trim().is_empty())
            {
                kinds[i..end].fill(Kind::Variable);
            }
            i = end;
        } else if (lang == "toml" || lang == "ini")
            && b == b'['
            && (i == 0 || bytes[i - 1] == b'\n')
        {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(bytes.len(), |p| i + p);
            kinds[i..end].fill(Kind::Type);
            i = end;
        } else {
            i += 1;
        }
    }
    kinds
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// Cuts `code` into lines of spans, merging bytes of the same kind. Kinds are per byte; a span
/// boundary inside a multi-byte character cannot happen because captures cover whole nodes and the
/// keyword scanner treats non-ASCII bytes as one word.
fn paint(code: &str, kinds: &[Kind], palette: &Palette) -> Vec<Vec<Span<'static>>> {
    let mut lines = Vec::new();
    let mut offset = 0;
    for line in code.split('\n') {
        let mut spans: Vec<Span<'static>> = Vec::new();
        let mut start = 0;
        let line_kinds = &kinds[offset..offset + line.len()];
        while start < line.len() {
            let kind = line_kinds[start];
            let mut end = start + 1;
            while end < line.len() && (line_kinds[end] == kind || !line.is_char_boundary(end)) {
                end += 1;
            }
            let text = line.get(start..end).unwrap_or("").to_string();
            spans.push(Span::styled(text, Style::new().fg(kind.color(palette))));
            start = end;
        }
        lines.push(spans);
        offset += line.len() + 1;
    }
    if code.ends_with('\n') {
        lines.pop();
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::color_depth::ColorDepth;
    use crate::tui::theme::Theme;

    fn color_of(lines: &[Vec<Span<'static>>], word: &str) -> Option<Color> {
        lines
            .iter()
            .flatten()
            .find(|s| s.content.contains(word))
            .and_then(|s| s.style.fg)
    }

    #[test]
    fn rust_keywords_strings_and_comments_get_their_colours() {
        let theme = Theme::default_for(ColorDepth::TrueColor);
        let p = &theme.colors;
        let lines = highlight("rust", "fn main() {\n    let s = \"hi\"; // note\n}\n", p);
        assert_eq!(lines.len(), 3);
        assert_eq!(color_of(&lines, "fn"), Some(p.syntax_keyword));
        assert_eq!(color_of(&lines, "\"hi\""), Some(p.syntax_string));
        assert_eq!(color_of(&lines, "// note"), Some(p.syntax_comment));
    }

    #[test]
    fn every_grammar_query_compiles() {
        for lang in ["rust", "python", "js", "ts", "go", "c", "cpp"] {
            let g = grammar(lang).expect("grammar");
            assert!(g.query.is_some(), "{lang} highlight query does not compile");
        }
    }

    #[test]
    fn unknown_languages_use_the_keyword_highlighter() {
        let theme = Theme::default_for(ColorDepth::TrueColor);
        let p = &theme.colors;
        let lines = highlight("bash", "# build\nif true; then echo \"ok\"; fi\n", p);
        assert_eq!(color_of(&lines, "# build"), Some(p.syntax_comment));
        assert_eq!(color_of(&lines, "\"ok\""), Some(p.syntax_string));
        let text: String = lines.iter().flatten().map(|s| s.content.as_ref()).collect();
        assert_eq!(text, "# buildif true; then echo \"ok\"; fi");
    }

    #[test]
    fn deeply_nested_code_highlights_on_a_small_stack() {
        // Code in a model's answer is untrusted input to the highlighter.
        let palette = Theme::default_for(ColorDepth::TrueColor).colors;
        let cases = [
            ("rust", "{".repeat(20_000) + &"}".repeat(20_000)),
            ("python", "[".repeat(20_000) + &"]".repeat(20_000)),
            ("bash", "$(".repeat(5_000) + "true" + &")".repeat(5_000)),
            ("tsx", "<a>".repeat(5_000) + &"</a>".repeat(5_000)),
        ];
        std::thread::Builder::new()
            .stack_size(512 << 10)
            .spawn(move || {
                for (lang, code) in &cases {
                    let lines = highlight(lang, code, &palette);
                    assert!(!lines.is_empty(), "{lang}");
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
