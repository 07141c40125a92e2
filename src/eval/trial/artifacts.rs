//! The task's artifacts, copied out of the trial's folders without following a link out.

use std::path::Path;

use super::files::write_fresh;
use crate::eval::fsutil::{copy_tree, remove_tree};
use crate::eval::isolation::TrialPaths;

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
        manifest.push(serde_json::json!({
            "source": a.source,
            "destination": a.destination,
            "status": status,
        }));
    }
    if let Ok(json) = serde_json::to_string_pretty(&manifest) {
        let _ = write_fresh(&paths.artifacts.join("manifest.json"), json.as_bytes());
    }
}
