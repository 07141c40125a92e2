//! `/diff`: the workspace's changes against HEAD plus untracked files, read with git subprocesses
//! (read-only, run off the UI thread).

use std::path::Path;

use tokio::process::Command;

async fn git(workspace: &Path, args: &[&str]) -> Result<(bool, String), String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(args)
        .env("GIT_PAGER", "cat")
        .output()
        .await
        .map_err(|e| format!("cannot run git: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() && text.is_empty() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok((out.status.success(), text))
}

/// The unified diff of tracked changes (staged and not) and of every untracked, non-ignored file.
pub async fn workspace_diff(workspace: &Path) -> Result<String, String> {
    let (_, inside) = git(workspace, &["rev-parse", "--is-inside-work-tree"])
        .await
        .map_err(|e| format!("{}: not a git repository ({e})", workspace.display()))?;
    if inside.trim() != "true" {
        return Err(format!("{}: not a git repository", workspace.display()));
    }
    // A repository without commits has no HEAD: diff against the empty tree then.
    let has_head = git(workspace, &["rev-parse", "--verify", "HEAD"])
        .await
        .map(|(ok, _)| ok)
        .unwrap_or(false);
    let base = if has_head {
        "HEAD"
    } else {
        "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    };
    let (_, mut diff) = git(workspace, &["diff", "--no-color", "--no-ext-diff", base]).await?;
    let (_, untracked) = git(
        workspace,
        &["ls-files", "--others", "--exclude-standard", "-z"],
    )
    .await?;
    for file in untracked.split('\0').filter(|f| !f.is_empty()) {
        // --no-index exits 1 when files differ, which is the point here.
        let (_, d) = git(
            workspace,
            &[
                "diff",
                "--no-color",
                "--no-ext-diff",
                "--no-index",
                "--",
                "/dev/null",
                file,
            ],
        )
        .await?;
        diff.push_str(&d);
    }
    Ok(diff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn diff_includes_untracked_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let run = |args: &[&str]| {
            std::process::Command::new("git")
                .arg("-C")
                .arg(root)
                .args(args)
                .output()
                .expect("git")
        };
        run(&["init", "-q"]);
        run(&["config", "user.email", "t@t"]);
        run(&["config", "user.name", "t"]);
        std::fs::write(root.join("a.txt"), "one\n").expect("write");
        run(&["add", "a.txt"]);
        run(&["commit", "-qm", "init"]);
        std::fs::write(root.join("a.txt"), "two\n").expect("write");
        std::fs::write(root.join("new.txt"), "fresh\n").expect("write");
        let diff = workspace_diff(root).await.expect("diff");
        assert!(diff.contains("-one") && diff.contains("+two"), "{diff}");
        assert!(diff.contains("+fresh"), "{diff}");
        let not_repo = tempfile::tempdir().expect("tempdir");
        assert!(workspace_diff(not_repo.path()).await.is_err());
    }
}
