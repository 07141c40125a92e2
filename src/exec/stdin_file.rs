//! Piped stdin saved where the tools can read it: `.baton/stdin/<id>.txt` in the workspace.
//!
//! The `<stdin>` block goes into the prompt as before (the answer hop gets all of it; the
//! route hop a one-line description). A 440 KB log read once stays in the model's context only
//! until the view is shrunk or compacted; saved as a file, the model can `grep` or `read_file`
//! it at any later step. The folder ignores itself (`.baton/stdin/.gitignore` holds `*`), so
//! it never shows in `git status`; checkpoints leave `.baton/` out, so undo never touches it.
//! The files are written by baton's own process through the untrusted-file writer (beneath the
//! workspace, no link followed, owner-only).

use std::path::Path;

/// Where the files go, relative to the workspace.
pub const STDIN_FOLDER: &str = ".baton/stdin";

/// Saves the content of `text`'s `<stdin>` block as a file in `workspace` and appends a line
/// after the block naming it. Returns the file's workspace-relative path; `text` is left as it
/// was when there is no block or the file cannot be written (the prompt still has it all).
pub fn save(text: &mut String, workspace: &Path) -> std::io::Result<Option<String>> {
    const OPEN: &str = "<stdin>\n";
    const CLOSE: &str = "</stdin>";
    let Some(start) = text.find(OPEN) else {
        return Ok(None);
    };
    let Some(end) = text.rfind(CLOSE).filter(|end| *end >= start + OPEN.len()) else {
        return Ok(None);
    };
    let content = text[start + OPEN.len()..end].to_string();
    let root = crate::untrusted_fs::Dir::open(workspace)?;
    let folder = Path::new(STDIN_FOLDER);
    root.write_atomic(&folder.join(".gitignore"), b"*\n", Some(0o644), true)?;
    let rel = format!("{STDIN_FOLDER}/{}.txt", uuid::Uuid::now_v7().simple());
    root.write_atomic(Path::new(&rel), content.as_bytes(), Some(0o600), true)?;
    text.insert_str(
        end + CLOSE.len(),
        &format!(
            "\n(The input above is also saved in the workspace as {rel}: read_file or grep it \
             there rather than quoting it from here.)"
        ),
    );
    Ok(Some(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_is_saved_and_named_after_it() {
        let ws = tempfile::tempdir().unwrap();
        let mut text = "find the error\n\n<stdin>\nline one\nERROR two\n</stdin>".to_string();
        let rel = save(&mut text, ws.path()).unwrap().expect("saved");
        assert!(
            rel.starts_with(".baton/stdin/") && rel.ends_with(".txt"),
            "{rel}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join(&rel)).unwrap(),
            "line one\nERROR two\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join(".baton/stdin/.gitignore")).unwrap(),
            "*\n"
        );
        assert!(text.starts_with("find the error\n\n<stdin>\nline one\nERROR two\n</stdin>\n"));
        assert!(text.contains(&format!("saved in the workspace as {rel}")));
        let mut plain = "no block here".to_string();
        assert_eq!(save(&mut plain, ws.path()).unwrap(), None);
        assert_eq!(plain, "no block here");
    }

    #[test]
    fn a_link_planted_at_the_folder_is_not_followed() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(".baton")).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join(".baton/stdin")).unwrap();
        let mut text = "x\n\n<stdin>\ndata\n</stdin>".to_string();
        assert!(save(&mut text, ws.path()).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        assert_eq!(text, "x\n\n<stdin>\ndata\n</stdin>", "left as it was");
    }
}
