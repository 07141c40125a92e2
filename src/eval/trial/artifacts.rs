//! The task's artifacts, copied out of the trial's folders without following a link out, or
//! out of a runtime's container from inside it.

use std::path::Path;

use super::files::write_fresh;
use crate::eval::container::{Container, Job};
use crate::eval::fsutil::{copy_tree, remove_tree};
use crate::eval::isolation::TrialPaths;
use crate::eval::process::Exit;

/// Makes `root/rel` free for a copy: no folder on the way is a link (`Err` then), and
/// whatever is at it is removed.
fn clear_destination(root: &Path, rel: &str) -> Result<(), ()> {
    let mut at = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return Ok(()),
            Ok(m) if i + 1 == parts.len() => {
                let removed = if m.is_dir() {
                    remove_tree(&at)
                } else {
                    std::fs::remove_file(&at)
                };
                return removed.map_err(|_| ());
            }
            Ok(m) if m.file_type().is_symlink() || !m.is_dir() => return Err(()),
            Ok(_) => {}
        }
    }
    Ok(())
}

/// Copies the task's `artifacts` out of the trial's folders into `artifacts/`, with a
/// `manifest.json` saying what was found. Links are not followed; paths outside the trial's
/// folders are not read.
pub(super) fn collect_artifacts(artifacts: &[crate::eval::task::Artifact], paths: &TrialPaths) {
    if artifacts.is_empty() {
        return;
    }
    let mut manifest = Vec::new();
    for a in artifacts {
        let dest = paths.artifacts.join(&a.destination);
        // A link the agent planted on the way (`/app/link -> /`) must not lead out.
        let inside = |p: &Path| {
            let root = std::fs::canonicalize(&paths.root).unwrap_or_else(|_| paths.root.clone());
            p.parent()
                .and_then(|d| std::fs::canonicalize(d).ok())
                .is_some_and(|d| d.starts_with(&root))
        };
        let status = match paths.host_path(a.source.trim_end_matches('/')) {
            // The artifacts folder is the agent's to write (`/logs/artifacts`): a link it
            // left on the way to the destination must not lead the copy out.
            _ if clear_destination(&paths.artifacts, &a.destination).is_err() => {
                "the destination is a link the trial made".to_string()
            }
            None => "outside the trial's folders".to_string(),
            Some(src) if !inside(&src) => {
                "outside the trial's folders (through a link)".to_string()
            }
            Some(src) => match std::fs::symlink_metadata(&src) {
                Err(_) => "missing".to_string(),
                Ok(m) if m.is_dir() => match copy_tree(&src, &dest, &[]) {
                    Ok(()) => "ok".to_string(),
                    Err(e) => e.to_string(),
                },
                Ok(m) if m.is_file() => {
                    let copied = dest
                        .parent()
                        .map_or(Ok(()), std::fs::create_dir_all)
                        .and_then(|()| std::fs::copy(&src, &dest).map(|_| ()));
                    match copied {
                        Ok(()) => "ok".to_string(),
                        Err(e) => e.to_string(),
                    }
                }
                Ok(_) => "not a file or folder (links are not followed)".to_string(),
            },
        };
        manifest.push(manifest_entry(a, status));
    }
    write_manifest(paths, &manifest);
}

/// One line of `manifest.json`: what was asked for and what became of it.
fn manifest_entry(a: &crate::eval::task::Artifact, status: String) -> serde_json::Value {
    serde_json::json!({
        "source": a.source,
        "destination": a.destination,
        "status": status,
    })
}

/// Writes `artifacts/manifest.json` afresh (the trial could have left something there).
fn write_manifest(paths: &TrialPaths, manifest: &[serde_json::Value]) {
    if let Ok(json) = serde_json::to_string_pretty(manifest) {
        let _ = write_fresh(&paths.artifacts.join("manifest.json"), json.as_bytes());
    }
}

/// Under a container runtime: copies the task's `artifacts` out of the container, through the
/// trial's `/logs/artifacts` mount, from inside it (a link in the container resolves there,
/// never on the host), with a `manifest.json` saying what was found.
pub(super) fn copy_artifacts_out(
    c: &mut Container,
    artifacts: &[crate::eval::task::Artifact],
    paths: &TrialPaths,
    cancel: &std::sync::atomic::AtomicBool,
) {
    if artifacts.is_empty() {
        return;
    }
    const COPY: &str =
        r#"test -e "$1" || exit 3; mkdir -p "$(dirname "$2")" && rm -rf "$2" && cp -a "$1" "$2""#;
    let mut manifest = Vec::new();
    let env = std::collections::BTreeMap::new();
    for a in artifacts {
        let dest = format!("/logs/artifacts/{}", a.destination.trim_start_matches('/'));
        let args = [
            "-c".to_string(),
            COPY.to_string(),
            "copy".to_string(),
            a.source.trim_end_matches('/').to_string(),
            dest,
        ];
        let job = Job {
            user: None,
            workdir: "/",
            env: &env,
            prelude: "",
            program: "sh",
            args: &args,
            stdout: "/dev/null",
            stderr: "/dev/null",
        };
        let outcome = c.run(&job, std::time::Duration::from_secs(300), cancel);
        let status = match outcome.exit {
            Exit::Code(0) => "ok".to_string(),
            Exit::Code(3) => "missing".to_string(),
            other => format!("the copy failed ({other:?})"),
        };
        manifest.push(manifest_entry(a, status));
    }
    write_manifest(paths, &manifest);
}
