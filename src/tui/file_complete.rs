//! `@` file completion: the workspace's files (the `ignore` walker, so .gitignore is respected),
//! ranked by nucleo-matcher's fuzzy path scoring. The file list is read once, on the first `@`.

use std::path::Path;

use nucleo_matcher::pattern::{CaseMatching, Normalization, Pattern};
use nucleo_matcher::{Config, Matcher};

/// More files than this are not listed: huge trees would make the first `@` slow.
const MAX_FILES: usize = 50_000;
pub const MAX_RESULTS: usize = 8;

pub struct FileIndex {
    files: Vec<String>,
    matcher: Matcher,
}

impl FileIndex {
    /// Lists files under `root` relative to it, honouring .gitignore, skipping hidden entries.
    pub fn scan(root: &Path) -> FileIndex {
        let mut files = Vec::new();
        // A folder whose ignore files the walker would block on (a FIFO a command made) is
        // left out; one above the root leaves the index empty.
        let blocked = crate::untrusted_fs::walk_would_block_at(root).is_some();
        let walk = ignore::WalkBuilder::new(root)
            .hidden(true)
            .filter_entry(|e| {
                !e.file_type().is_some_and(|t| t.is_dir())
                    || crate::untrusted_fs::walker_would_block_in(e.path()).is_none()
            })
            .build();
        // The walk reads the root's ignore files at its first step: not taken at all.
        let steps = if blocked { 0 } else { usize::MAX };
        for entry in walk.take(steps).flatten() {
            if files.len() >= MAX_FILES {
                break;
            }
            if entry.file_type().is_some_and(|t| t.is_file())
                && let Ok(rel) = entry.path().strip_prefix(root)
                && let Some(s) = rel.to_str()
            {
                files.push(s.to_string());
            }
        }
        files.sort();
        let mut config = Config::DEFAULT;
        config.set_match_paths();
        FileIndex {
            files,
            matcher: Matcher::new(config),
        }
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The best matches of `query` (shortest paths first on ties; all files when empty).
    pub fn search(&mut self, query: &str) -> Vec<String> {
        if query.is_empty() {
            return self.files.iter().take(MAX_RESULTS).cloned().collect();
        }
        let pattern = Pattern::parse(query, CaseMatching::Smart, Normalization::Smart);
        let mut hits = pattern.match_list(self.files.iter(), &mut self.matcher);
        hits.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.len().cmp(&b.0.len())));
        hits.into_iter()
            .take(MAX_RESULTS)
            .map(|(f, _)| f.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_files_fuzzily_and_respects_gitignore() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/tui")).expect("mkdir");
        std::fs::create_dir_all(root.join("target")).expect("mkdir");
        std::fs::create_dir_all(root.join(".git")).expect("mkdir");
        for f in [
            "src/main.rs",
            "src/tui/composer.rs",
            "README.md",
            "target/junk.rs",
        ] {
            std::fs::write(root.join(f), "x").expect("write");
        }
        std::fs::write(root.join(".gitignore"), "target/\n").expect("write");
        let mut index = FileIndex::scan(root);
        assert_eq!(index.len(), 3, "target/ ignored, hidden files skipped");
        assert_eq!(
            index.search("cmpsr").first().map(String::as_str),
            Some("src/tui/composer.rs")
        );
        assert_eq!(
            index.search("main").first().map(String::as_str),
            Some("src/main.rs")
        );
        assert!(index.search("zzzz").is_empty());
    }
}
