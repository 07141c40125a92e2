//! A file change as a unified diff: file header with +/− counts, hunk headers, and every line with
//! its old and new line numbers, added lines green, removed lines red.

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::RenderCtx;
use crate::tui::theme::Theme;
use crate::tui::wrap::hard_wrap;

pub struct DiffCell {
    pub path: String,
    pub diff: String,
}

impl DiffCell {
    pub fn layout(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let (added, removed) = count_changes(&self.diff);
        let p = &ctx.theme.colors;
        let mut out = vec![Line::from(vec![
            Span::styled(
                "± ",
                Style::new().fg(p.diff_file).add_modifier(Modifier::BOLD),
            ),
            Span::styled(
                self.path.clone(),
                Style::new().fg(p.diff_file).add_modifier(Modifier::BOLD),
            ),
            Span::styled(format!("  +{added}"), Style::new().fg(p.diff_add)),
            Span::styled(format!(" −{removed}"), Style::new().fg(p.diff_del)),
        ])];
        out.extend(render_diff_lines(&self.diff, width, ctx.theme, true));
        out
    }
}

fn count_changes(diff: &str) -> (usize, usize) {
    let mut added = 0;
    let mut removed = 0;
    for line in diff.lines() {
        if line.starts_with('+') && !line.starts_with("+++") {
            added += 1;
        } else if line.starts_with('-') && !line.starts_with("---") {
            removed += 1;
        }
    }
    (added, removed)
}

/// Parses `@@ -a,b +c,d @@` into (a, c).
fn hunk_starts(line: &str) -> Option<(usize, usize)> {
    let mut parts = line.split_whitespace().skip(1);
    let old = parts.next()?.strip_prefix('-')?;
    let new = parts.next()?.strip_prefix('+')?;
    let first = |s: &str| s.split(',').next().and_then(|n| n.parse::<usize>().ok());
    Some((first(old)?, first(new)?))
}

/// Colours a unified diff (one or many files). `skip_file_headers` drops `---`/`+++`/`diff --git`
/// lines when the caller already shows the path.
pub fn render_diff_lines(
    diff: &str,
    width: usize,
    theme: &Theme,
    skip_file_headers: bool,
) -> Vec<Line<'static>> {
    let p = &theme.colors;
    let mut out = Vec::new();
    let (mut old_no, mut new_no) = (0usize, 0usize);
    let gutter_w = diff
        .lines()
        .filter_map(hunk_starts)
        .map(|(a, b)| a.max(b) + diff.lines().count())
        .max()
        .unwrap_or(1)
        .to_string()
        .len()
        .max(3);
    let num = |n: Option<usize>| match n {
        Some(n) => format!("{n:>gutter_w$}"),
        None => " ".repeat(gutter_w),
    };
    for line in diff.lines() {
        let is_file_header = line.starts_with("diff --git")
            || line.starts_with("+++ ")
            || line.starts_with("--- ")
            || line.starts_with("index ")
            || line.starts_with("new file")
            || line.starts_with("deleted file");
        if is_file_header {
            if !skip_file_headers && (line.starts_with("diff --git") || line.starts_with("+++ ")) {
                let shown = line
                    .strip_prefix("+++ b/")
                    .or_else(|| line.strip_prefix("+++ "))
                    .unwrap_or(line);
                if line.starts_with("+++") {
                    out.push(Line::from(Span::styled(
                        format!("± {shown}"),
                        Style::new().fg(p.diff_file).add_modifier(Modifier::BOLD),
                    )));
                }
            }
            continue;
        }
        if line.starts_with("@@") {
            if let Some((a, b)) = hunk_starts(line) {
                old_no = a;
                new_no = b;
            }
            out.push(Line::from(Span::styled(
                line.to_string(),
                Style::new().fg(p.diff_hunk),
            )));
            continue;
        }
        let gutter_style = Style::new().fg(p.diff_line_no);
        let (old, new, sign, style) = match line.chars().next() {
            Some('+') => {
                new_no += 1;
                (
                    None,
                    Some(new_no - 1),
                    "+",
                    Style::new().fg(p.diff_add).bg(p.diff_add_bg),
                )
            }
            Some('-') => {
                old_no += 1;
                (
                    Some(old_no - 1),
                    None,
                    "-",
                    Style::new().fg(p.diff_del).bg(p.diff_del_bg),
                )
            }
            Some('\\') => (None, None, "", Style::new().fg(p.dim)),
            _ => {
                old_no += 1;
                new_no += 1;
                (
                    Some(old_no - 1),
                    Some(new_no - 1),
                    " ",
                    Style::new().fg(p.fg),
                )
            }
        };
        let body = line.get(1..).unwrap_or("");
        let gutter = Span::styled(format!("{} {} ", num(old), num(new)), gutter_style);
        let text = if sign.is_empty() {
            line.to_string()
        } else {
            format!("{sign}{body}")
        };
        let rendered = Line::from(vec![gutter, Span::styled(text, style)]);
        let indent = Span::raw(" ".repeat(2 * gutter_w + 2));
        out.extend(hard_wrap(rendered, width, std::slice::from_ref(&indent)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_numbers_follow_hunks() {
        let theme = Theme::default_for(crate::tui::color_depth::ColorDepth::TrueColor);
        let diff = "--- a/x\n+++ b/x\n@@ -3,2 +3,3 @@\n ctx\n-old\n+new\n+more\n";
        let lines: Vec<String> = render_diff_lines(diff, 60, &theme, true)
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect();
        assert_eq!(lines[1], "  3   3  ctx");
        assert_eq!(lines[2], "  4     -old");
        assert_eq!(lines[3], "      4 +new");
        assert_eq!(lines[4], "      5 +more");
        assert_eq!(count_changes(diff), (2, 1));
    }
}
