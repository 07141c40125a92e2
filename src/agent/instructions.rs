//! Project instructions: AGENTS.md files from the repository root down to the working directory,
//! plus a user-level one in the config dir, given to every expert's view (capped). CLAUDE.md is
//! read in a directory that has no AGENTS.md. A project's files are read as any file a
//! command or a cloned repository may have planted: never through a link, never a FIFO, bounded
//! (an `AGENTS.md` linked to `~/.ssh/id_rsa` would otherwise put the key in every request).

use std::path::{Path, PathBuf};

/// Total size cap of all instruction text given to the model.
pub const INSTRUCTIONS_CAP: usize = 32 * 1024;
/// The largest instruction file read at all (its first `INSTRUCTIONS_CAP` bytes are used).
const FILE_MAX_BYTES: u64 = 1 << 20;

const PRIMARY: &str = "AGENTS.md";
const SECONDARY: &str = "CLAUDE.md";

/// The instructions found for a workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectInstructions {
    /// The files read, in the order they are given to the model (user-level first, then from the
    /// repository root down to the working directory).
    pub files: Vec<PathBuf>,
    /// The text for the system message (empty when there are none).
    pub text: String,
    /// Whether the cap cut the text.
    pub truncated: bool,
}

/// Finds the instruction files for `cwd`: `user_dir/AGENTS.md` (the config dir), then one file
/// per directory from the repository root (the nearest ancestor with `.git`, when the user owns
/// that `.git`; `cwd` itself otherwise) down to `cwd`, those above `cwd` only when the user owns
/// them. Unreadable files are skipped, not fatal.
pub fn discover(cwd: &Path, user_dir: Option<&Path>) -> ProjectInstructions {
    let mut files = Vec::new();
    if let Some(dir) = user_dir
        && let Some(file) = pick_file(dir)
    {
        // The user's own file: it may be a link into their dotfiles.
        files.push((file, None));
    }
    let root = repo_root(cwd).unwrap_or_else(|| cwd.to_path_buf());
    let mut chain: Vec<PathBuf> = cwd
        .ancestors()
        .take_while(|dir| dir.starts_with(&root))
        .map(Path::to_path_buf)
        .collect();
    chain.reverse();
    files.extend(
        chain
            .iter()
            .filter_map(|dir| pick_file(dir))
            // Above the working directory, only the user's own: a shared folder (`/srv`, a
            // sticky `/data`) may hold another account's file.
            .filter(|file| file.parent() == Some(cwd) || owned_by_me(file))
            .map(|file| (file, Some(root.clone()))),
    );
    assemble(files)
}

/// Whether `path` (not followed) belongs to the user baton runs as.
fn owned_by_me(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    path.symlink_metadata()
        .is_ok_and(|m| m.uid() == rustix::process::geteuid().as_raw())
}

/// The instruction file of `dir`: AGENTS.md, else CLAUDE.md, whatever they are (a link or a
/// FIFO is refused when read, not skipped for the other name).
fn pick_file(dir: &Path) -> Option<PathBuf> {
    [PRIMARY, SECONDARY]
        .iter()
        .map(|name| dir.join(name))
        .find(|p| p.symlink_metadata().is_ok())
}

/// The bytes of an instruction file: a project's (`anchor` is its repository root) through the
/// untrusted-file reader, the user's own as it is.
fn read_instructions(path: &Path, anchor: Option<&Path>) -> Option<Vec<u8>> {
    match anchor {
        Some(root) => crate::untrusted_fs::read_file(path, &[root], FILE_MAX_BYTES).ok(),
        None => crate::untrusted_fs::read_following(path, FILE_MAX_BYTES).ok(),
    }
}

/// The nearest folder above `cwd` (or itself) with a `.git`, when that `.git` is the user's:
/// git itself refuses a repository another account owns ("dubious ownership").
fn repo_root(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .filter(|dir| owned_by_me(&dir.join(".git")))
        .map(Path::to_path_buf)
}

fn assemble(candidates: Vec<(PathBuf, Option<PathBuf>)>) -> ProjectInstructions {
    let mut out = ProjectInstructions::default();
    for (path, anchor) in candidates {
        let Some(bytes) = read_instructions(&path, anchor.as_deref()) else {
            continue;
        };
        let content = String::from_utf8_lossy(&bytes);
        let content = content.trim();
        if content.is_empty() {
            continue;
        }
        let block = format!("# Instructions from {}\n\n{}\n\n", path.display(), content);
        out.files.push(path);
        let room = INSTRUCTIONS_CAP.saturating_sub(out.text.len());
        if block.len() <= room {
            out.text.push_str(&block);
        } else {
            let mut cut = room;
            while cut > 0 && !block.is_char_boundary(cut) {
                cut -= 1;
            }
            out.text.push_str(&block[..cut]);
            out.truncated = true;
            break;
        }
    }
    if out.truncated {
        out.text
            .push_str("\n[Project instructions truncated at 32 KiB.]\n");
    }
    out.text = out.text.trim_end().to_string();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project's AGENTS.md linked to a secret of the user's is not read (the attack round
    /// after #27: the key reached the model in every request, from a cloned repository alone).
    #[test]
    fn a_project_file_linked_anywhere_is_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        let secret = tmp.path().join("id_rsa");
        std::fs::write(&secret, "SSH-PRIVATE-KEY").unwrap();
        std::os::unix::fs::symlink(&secret, root.join("AGENTS.md")).unwrap();
        std::fs::write(root.join("CLAUDE.md"), "not reached: AGENTS.md stands here").unwrap();
        let found = discover(&root, None);
        assert!(!found.text.contains("SSH-PRIVATE-KEY"), "{}", found.text);
        assert!(found.files.is_empty(), "{:?}", found.files);
    }

    #[test]
    fn discovers_from_root_down_with_claude_md_fallback_and_user_file_first() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        let sub = root.join("crates/core");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(tmp.path().join("AGENTS.md"), "outside the repo").unwrap();
        std::fs::write(root.join("AGENTS.md"), "root rules").unwrap();
        std::fs::write(root.join("CLAUDE.md"), "ignored: AGENTS.md wins").unwrap();
        std::fs::write(root.join("crates/CLAUDE.md"), "crates rules").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "core rules").unwrap();
        let user = tmp.path().join("config");
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(user.join("AGENTS.md"), "user rules").unwrap();

        let found = discover(&sub, Some(&user));
        let names: Vec<String> = found
            .files
            .iter()
            .map(|p| p.strip_prefix(tmp.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            vec![
                "config/AGENTS.md",
                "repo/AGENTS.md",
                "repo/crates/CLAUDE.md",
                "repo/crates/core/AGENTS.md"
            ]
        );
        let order: Vec<usize> = ["user rules", "root rules", "crates rules", "core rules"]
            .iter()
            .map(|s| found.text.find(s).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]));
        assert!(!found.text.contains("outside the repo"));
        assert!(!found.text.contains("ignored"));
        assert!(!found.truncated);
    }

    #[test]
    fn caps_the_total_at_32_kib() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("AGENTS.md"), "é".repeat(40 * 1024)).unwrap();
        let found = discover(tmp.path(), None);
        assert!(found.truncated);
        assert!(found.text.len() <= INSTRUCTIONS_CAP + 64);
        assert!(
            found
                .text
                .ends_with("[Project instructions truncated at 32 KiB.]")
        );
    }

    /// Round 26 (low): another account's `git init` and `AGENTS.md` in a shared folder above
    /// the project were put in every expert's system message.
    #[test]
    fn another_accounts_repository_or_file_above_the_workspace_is_not_read() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("shared");
        let project = shared.join("project");
        std::fs::create_dir_all(shared.join(".git")).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(shared.join("AGENTS.md"), "injected").unwrap();
        std::fs::write(project.join("AGENTS.md"), "mine").unwrap();
        let chown = |p: &Path| std::os::unix::fs::lchown(p, Some(65534), Some(65534)).unwrap();
        chown(&shared.join(".git"));
        let found = discover(&project, None);
        assert_eq!(found.files, vec![project.join("AGENTS.md")], "{found:?}");
        // The user's repository, another account's file in it above the workspace.
        std::os::unix::fs::lchown(shared.join(".git"), Some(0), Some(0)).unwrap();
        chown(&shared.join("AGENTS.md"));
        let found = discover(&project, None);
        assert_eq!(found.files, vec![project.join("AGENTS.md")], "{found:?}");
        std::os::unix::fs::lchown(shared.join("AGENTS.md"), Some(0), Some(0)).unwrap();
        let found = discover(&project, None);
        assert_eq!(found.files.len(), 2, "{found:?}");
    }

    #[test]
    fn nothing_found_is_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let found = discover(tmp.path(), None);
        assert!(found.files.is_empty() && found.text.is_empty());
    }
}
