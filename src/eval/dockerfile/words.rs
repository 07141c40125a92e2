//! Dockerfile text as Docker reads it: logical lines, words, and `$VAR` expansion.

use super::problem::Problem;

/// Joins `\`-continued lines and drops comments; yields (first line number, text).
pub(super) fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        if current.is_empty() {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            start = n + 1;
        } else if line.trim_start().starts_with('#') {
            continue;
        }
        if let Some(body) = line.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
        } else {
            current.push_str(line);
            out.push((start, current.trim().to_string()));
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push((start, current.trim().to_string()));
    }
    out
}

pub(super) fn shell_words(s: &str) -> Result<Vec<String>, Problem> {
    if s.trim_start().starts_with('[') {
        let v: Vec<String> =
            serde_json::from_str(s).map_err(|e| Problem::JsonArray(e.to_string()))?;
        return Ok(v);
    }
    shlex::split(s).ok_or_else(|| Problem::UnbalancedQuotes(s.to_string()))
}

pub(super) type Lookup<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// The most text a Dockerfile's variables may expand to, on one line or all lines together
/// (real ones stay in kilobytes; doubling a variable per line reaches gigabytes in 30 lines).
pub(super) const MAX_EXPANDED: usize = 4 << 20;

/// Splits `s` into words the way Docker does for ENV, ARG, COPY and WORKDIR: quotes removed,
/// `\` escapes, and `$VAR`, `${VAR}`, `${VAR:-word}`, `${VAR:+word}`, `${VAR:?message}` (and
/// the forms without `:`) expanded; single quotes keep `$` literal.
pub(super) fn expand_words(s: &str, lookup: &Lookup) -> Result<Vec<String>, Problem> {
    expand(s, true, lookup)
}

/// [`expand_words`] without splitting: the whole text is one word.
pub(super) fn expand_one(s: &str, lookup: &Lookup) -> Result<String, Problem> {
    Ok(expand(s, false, lookup)?
        .into_iter()
        .next()
        .unwrap_or_default())
}

fn expand(s: &str, split: bool, lookup: &Lookup) -> Result<Vec<String>, Problem> {
    let chars: Vec<char> = s.chars().collect();
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some('\'') => {
                if c == '\'' {
                    quote = None;
                } else {
                    cur.push(c);
                }
                i += 1;
            }
            Some(_) => {
                if c == '"' {
                    quote = None;
                    i += 1;
                } else if c == '\\' && matches!(chars.get(i + 1), Some('"' | '\\' | '$')) {
                    cur.push(chars[i + 1]);
                    i += 2;
                } else if c == '$' {
                    i = expand_dollar(&chars, i, &mut cur, lookup, s)?;
                } else {
                    cur.push(c);
                    i += 1;
                }
            }
            None => {
                if split && c.is_whitespace() {
                    if in_word {
                        words.push(std::mem::take(&mut cur));
                        in_word = false;
                    }
                    i += 1;
                    continue;
                }
                in_word = true;
                match c {
                    '\'' | '"' => {
                        quote = Some(c);
                        i += 1;
                    }
                    '\\' if i + 1 < chars.len() => {
                        cur.push(chars[i + 1]);
                        i += 2;
                    }
                    '$' => i = expand_dollar(&chars, i, &mut cur, lookup, s)?,
                    _ => {
                        cur.push(c);
                        i += 1;
                    }
                }
            }
        }
    }
    if quote.is_some() {
        return Err(Problem::UnbalancedQuotes(s.to_string()));
    }
    if in_word || !split {
        words.push(cur);
    }
    Ok(words)
}

/// `next`, unless `out` grew past what any Dockerfile needs.
fn bounded(out: &str, next: usize) -> Result<usize, Problem> {
    if out.len() > MAX_EXPANDED {
        return Err(Problem::ExpandsTooFar);
    }
    Ok(next)
}

/// Expands the reference at `chars[i] == '$'` into `out`; returns the index after it.
fn expand_dollar(
    chars: &[char],
    i: usize,
    out: &mut String,
    lookup: &Lookup,
    whole: &str,
) -> Result<usize, Problem> {
    let is_start = |c: char| c.is_ascii_alphabetic() || c == '_';
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    match chars.get(i + 1) {
        Some('{') => {
            let mut j = i + 2;
            let name_start = j;
            while j < chars.len() && is_name(chars[j]) {
                j += 1;
            }
            let name: String = chars[name_start..j].iter().collect();
            if name.is_empty()
                || !chars[name_start].is_ascii_alphabetic() && chars[name_start] != '_'
            {
                return Err(Problem::BadVariable(whole.to_string()));
            }
            // The operator, then the word up to the matching brace.
            let colon = chars.get(j) == Some(&':');
            let op_at = if colon { j + 1 } else { j };
            let op = match chars.get(op_at) {
                Some('}') if !colon => None,
                Some(c @ ('-' | '+' | '?')) => Some(*c),
                _ => return Err(Problem::BadVariable(whole.to_string())),
            };
            let Some(op) = op else {
                out.push_str(&lookup(&name).unwrap_or_default());
                return bounded(out, j + 1);
            };
            let word_start = op_at + 1;
            let mut depth = 0usize;
            let mut k = word_start;
            loop {
                match chars.get(k) {
                    None => return Err(Problem::BadVariable(whole.to_string())),
                    Some('$') if chars.get(k + 1) == Some(&'{') => {
                        depth += 1;
                        // Each level is a recursion when expanded: keep it shallow.
                        if depth > 16 {
                            return Err(Problem::BadVariable(whole.to_string()));
                        }
                        k += 2;
                    }
                    Some('}') if depth == 0 => break,
                    Some('}') => {
                        depth -= 1;
                        k += 1;
                    }
                    Some(_) => k += 1,
                }
            }
            let raw: String = chars[word_start..k].iter().collect();
            let value = lookup(&name);
            let set = if colon {
                value.as_deref().is_some_and(|v| !v.is_empty())
            } else {
                value.is_some()
            };
            match op {
                '-' if set => out.push_str(&value.unwrap_or_default()),
                '-' => out.push_str(&expand_one(&raw, lookup)?),
                '+' if set => out.push_str(&expand_one(&raw, lookup)?),
                '+' => {}
                _ if set => out.push_str(&value.unwrap_or_default()),
                _ => {
                    return Err(Problem::UnsetVariable {
                        name,
                        message: expand_one(&raw, lookup)?,
                    });
                }
            }
            bounded(out, k + 1)
        }
        Some(&c) if is_start(c) => {
            let mut j = i + 1;
            while j < chars.len() && is_name(chars[j]) {
                j += 1;
            }
            let name: String = chars[i + 1..j].iter().collect();
            out.push_str(&lookup(&name).unwrap_or_default());
            bounded(out, j)
        }
        _ => {
            out.push('$');
            Ok(i + 1)
        }
    }
}

/// `ENV K=V K2=V2` or the legacy `ENV K value with spaces`; values expanded with the variables
/// as they were before this instruction.
pub(super) fn parse_env(rest: &str, lookup: &Lookup) -> Result<Vec<(String, String)>, Problem> {
    let first = rest.split_whitespace().next().unwrap_or_default();
    if !first.contains('=') {
        let value = rest.trim_start()[first.len()..].trim();
        return Ok(vec![(first.to_string(), expand_one(value, lookup)?)]);
    }
    Ok(expand_words(rest, lookup)?
        .into_iter()
        .filter_map(|w| {
            w.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect())
}

pub(super) fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn lookup_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn variable_references_follow_dockerfile_semantics() {
        let vars = lookup_of(&[("A", "x"), ("EMPTY", "")]);
        let one = |s: &str| expand_one(s, &vars).unwrap();
        assert_eq!(one("$A/${A}"), "x/x");
        assert_eq!(one("${NOPE:-d}|${EMPTY:-d}|${EMPTY-d}|${A:-d}"), "d|d||x");
        assert_eq!(
            one("${A:+set}|${NOPE:+set}|${EMPTY:+set}|${EMPTY+set}"),
            "set|||set"
        );
        assert_eq!(one("${NOPE:-${A}y}"), "xy");
        assert_eq!(one("'$A' \"$A\" \\$A $"), "$A x $A $");
        assert_eq!(one("cost: 5$"), "cost: 5$");
        assert!(matches!(
            expand_one("${NOPE:?must be set}", &vars),
            Err(Problem::UnsetVariable { name, message }) if name == "NOPE" && message == "must be set"
        ));
        assert!(matches!(
            expand_one("${A", &vars),
            Err(Problem::BadVariable(_))
        ));
        assert_eq!(
            expand_words("a=\"$A b\" c=${NOPE:-z}", &vars).unwrap(),
            vec!["a=x b", "c=z"]
        );
    }
}
