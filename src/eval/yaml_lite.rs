//! A reader for the top-level scalar keys of a TB1 `task.yaml` (plain, quoted and block scalars).
//!
//! TB1 task files are flat: `instruction: |-` plus a handful of numbers and strings. Lists and
//! nested maps (`tags:`) are skipped. This avoids a YAML dependency for one file format.

use std::collections::BTreeMap;

/// A line this reader cannot make sense of (1-based line numbers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    /// A top-level line without `key:`.
    #[error("line {line}: expected 'key: value', got '{text}'")]
    NotKeyValue { line: usize, text: String },
    /// A quoted scalar whose closing quote is missing.
    #[error("line {line}: unterminated {quote}-quoted string")]
    Unterminated { line: usize, quote: &'static str },
}

/// Parses the top-level scalar keys. Keys whose value is a list or a map are left out.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, YamlError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if line.trim().is_empty()
            || line.trim_start().starts_with('#')
            || line.starts_with([' ', '\t', '-'])
        {
            continue;
        }
        let Some((key, rest)) = line.split_once(':') else {
            return Err(YamlError::NotKeyValue {
                line: i,
                text: line.to_string(),
            });
        };
        let key = key.trim().trim_matches(['"', '\'']).to_string();
        let rest = strip_comment(rest.trim());
        if let Some(style) = rest.strip_prefix(['|', '>']) {
            let folded = rest.starts_with('>');
            let chomp = if style.contains('-') {
                Chomp::Strip
            } else if style.contains('+') {
                Chomp::Keep
            } else {
                Chomp::Clip
            };
            let start = i;
            while i < lines.len()
                && (lines[i].trim().is_empty() || lines[i].starts_with([' ', '\t']))
            {
                i += 1;
            }
            out.insert(key, block_scalar(&lines[start..i], folded, chomp));
        } else if rest.is_empty() {
            // A nested map or a list follows (skip its indented lines), or a plain scalar
            // that starts on the next line.
            let start = i;
            while i < lines.len()
                && (lines[i].trim().is_empty() || lines[i].starts_with([' ', '\t', '-']))
            {
                i += 1;
            }
            let first = lines[start..i]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.is_empty());
            if let Some(first) = first
                && !first.starts_with('-')
                && !first.starts_with('#')
                && !looks_like_key(first)
                && lines[start..i].iter().all(|l| !l.starts_with('-'))
            {
                out.insert(key, fold_plain("", &lines[start..i]));
            }
        } else if rest.starts_with('[') || rest.starts_with('{') {
            continue;
        } else if rest.starts_with(['"', '\'']) {
            out.insert(key, unquote(rest, i)?);
        } else {
            // A plain scalar goes on over the indented lines that follow, folded.
            let start = i;
            while i < lines.len()
                && (lines[i].trim().is_empty() || lines[i].starts_with([' ', '\t']))
            {
                i += 1;
            }
            out.insert(key, fold_plain(rest, &lines[start..i]));
        }
    }
    Ok(out)
}

/// `name: …` (a key of a nested map), as opposed to text.
fn looks_like_key(line: &str) -> bool {
    match line.split_once(':') {
        Some((k, v)) => {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | '\''))
                && (v.is_empty() || v.starts_with(' '))
        }
        None => false,
    }
}

/// A multi-line plain scalar: its lines trimmed and joined by a space; an empty line is a
/// line break. Trailing empty lines are not part of it.
fn fold_plain(first: &str, more: &[&str]) -> String {
    let mut out = first.to_string();
    let mut breaks = 0;
    for line in more {
        let text = line.trim();
        if text.is_empty() {
            breaks += 1;
            continue;
        }
        if !out.is_empty() {
            if breaks > 0 {
                out.push_str(&"\n".repeat(breaks));
            } else {
                out.push(' ');
            }
        }
        breaks = 0;
        out.push_str(strip_comment(text));
    }
    out
}

#[derive(Clone, Copy)]
enum Chomp {
    Strip,
    Clip,
    Keep,
}

fn strip_comment(s: &str) -> &str {
    if s.starts_with(['"', '\'']) {
        return s;
    }
    match s.find(" #") {
        Some(at) => s[..at].trim_end(),
        None => s,
    }
}

fn block_scalar(lines: &[&str], folded: bool, chomp: Chomp) -> String {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let body: Vec<&str> = lines
        .iter()
        .map(|l| if l.len() >= indent { &l[indent..] } else { "" })
        .collect();
    let mut text = if folded {
        let mut s = String::new();
        for (n, l) in body.iter().enumerate() {
            if n > 0 {
                s.push(
                    if l.is_empty() || body[n - 1].is_empty() || l.starts_with(' ') {
                        '\n'
                    } else {
                        ' '
                    },
                );
            }
            s.push_str(l);
        }
        s
    } else {
        body.join("\n")
    };
    match chomp {
        Chomp::Strip => text.truncate(text.trim_end_matches('\n').len()),
        Chomp::Clip => {
            text.truncate(text.trim_end_matches('\n').len());
            text.push('\n');
        }
        Chomp::Keep => text.push('\n'),
    }
    text
}

fn unquote(s: &str, line: usize) -> Result<String, YamlError> {
    if let Some(inner) = s.strip_prefix('"') {
        let inner = inner.strip_suffix('"').ok_or(YamlError::Unterminated {
            line,
            quote: "double",
        })?;
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('"') => out.push('"'),
                Some('\\') => out.push('\\'),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            }
        }
        Ok(out)
    } else if let Some(inner) = s.strip_prefix('\'') {
        let inner = inner.strip_suffix('\'').ok_or(YamlError::Unterminated {
            line,
            quote: "single",
        })?;
        Ok(inner.replace("''", "'"))
    } else {
        Ok(s.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_block_and_plain_scalars() {
        let doc = parse(
            "instruction: |-\n  Fix the build.\n\n  Then run it.\nauthor_name: \"A B\"\ntags:\n  - x\n  - y\nmax_agent_timeout_sec: 180 # short\ndifficulty: easy\n",
        )
        .unwrap();
        assert_eq!(doc["instruction"], "Fix the build.\n\nThen run it.");
        assert_eq!(doc["author_name"], "A B");
        assert_eq!(doc["max_agent_timeout_sec"], "180");
        assert_eq!(doc["difficulty"], "easy");
        assert!(!doc.contains_key("tags"));
    }

    #[test]
    fn bad_lines_name_their_number() {
        assert_eq!(
            parse("a: 1\nno colon here\n"),
            Err(YamlError::NotKeyValue {
                line: 2,
                text: "no colon here".into()
            })
        );
        let err = parse("x: 1\n\nname: \"open\n").unwrap_err();
        assert_eq!(err.to_string(), "line 3: unterminated double-quoted string");
    }

    /// A plain scalar over several lines (as PyYAML reads TB1's mlflow-register), on the key's
    /// line or starting below it.
    #[test]
    fn plain_multi_line_scalars_are_folded() {
        let doc = parse(
            "instruction: Register the model\n  in MLflow and\n\n  serve it.\nauthor: x\nother:\n  Train it\n  now.\nmeta:\n  a: 1\n",
        )
        .unwrap();
        assert_eq!(
            doc["instruction"],
            "Register the model in MLflow and\nserve it."
        );
        assert_eq!(doc["author"], "x");
        assert_eq!(doc["other"], "Train it now.");
        assert!(!doc.contains_key("meta"));
    }

    #[test]
    fn folded_scalar_joins_lines() {
        let doc = parse("instruction: >\n  one\n  two\nx: 1\n").unwrap();
        assert_eq!(doc["instruction"], "one two\n");
    }
}
