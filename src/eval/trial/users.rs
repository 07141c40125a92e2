//! The task's users: the uids its `user` values get in the trial, and its user database.

use std::collections::BTreeMap;

use crate::eval::isolation::{TrialPaths, TrialUser};
use crate::eval::task::Task;

/// Whether a `user` value means root.
pub(super) fn is_root(spec: &str) -> bool {
    matches!(spec.split(':').next(), Some("root" | "0" | ""))
}

/// The task's users (task, step and Dockerfile `USER` values other than root) with the uids
/// they get in the trial: a number as written, a name the first uid from 1000 up that the
/// host's user database does not use (as `useradd` picks in an image), in name order. Their
/// entries are added to the trial's copy of `/etc/passwd` and `/etc/group`.
pub(super) fn trial_users(
    task: &Task,
    paths: &TrialPaths,
) -> Result<BTreeMap<String, TrialUser>, String> {
    let mut specs: Vec<&str> = [task.agent_user.as_deref(), task.verifier_user.as_deref()]
        .into_iter()
        .chain(
            task.steps
                .iter()
                .flat_map(|s| [s.agent_user.as_deref(), s.verifier_user.as_deref()]),
        )
        .flatten()
        .filter(|u| !is_root(u))
        .collect();
    specs.sort();
    specs.dedup();
    if specs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let ids = |db: &str| -> Vec<(String, u32)> {
        db.lines()
            .filter_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?.to_string();
                let id = f.nth(1)?.parse().ok()?;
                Some((name, id))
            })
            .collect()
    };
    let host_users = ids(&passwd);
    let host_groups = ids(&group);
    let valid = |n: &str| {
        !n.is_empty()
            && n.len() <= 32
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            && !n.starts_with('-')
    };
    let mut next = 1000u32;
    let mut fresh = |taken: &dyn Fn(u32) -> bool| {
        while taken(next) {
            next += 1;
        }
        next += 1;
        next - 1
    };
    let mut users = BTreeMap::new();
    let mut passwd_extra = String::new();
    let mut group_extra = String::new();
    for spec in specs {
        let (name, group_name) = match spec.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (spec, None),
        };
        if !valid(name) || group_name.is_some_and(|g| !valid(g)) {
            return Err(format!(
                "user '{spec}' is not a user name or uid (letters, digits, '_', '-', '.')"
            ));
        }
        let uid = match name.parse::<u32>() {
            // bwrap takes any uid, but (uid_t)-1 and beyond 2^31 are nobody's.
            Ok(n) if n >= 1 << 31 => return Err(format!("user '{spec}': uid out of range")),
            Ok(n) => n,
            Err(_) => fresh(&|id| {
                host_users.iter().any(|(_, u)| *u == id)
                    || users.values().any(|u: &TrialUser| u.uid == id)
            }),
        };
        let gid = match group_name {
            None => uid,
            Some(g) => match g.parse::<u32>() {
                Ok(n) if n >= 1 << 31 => return Err(format!("user '{spec}': gid out of range")),
                Ok(n) => n,
                Err(_) => host_groups
                    .iter()
                    .find(|(n, _)| n == g)
                    .map(|(_, id)| *id)
                    .unwrap_or(uid),
            },
        };
        let shown = if name.parse::<u32>().is_ok() {
            format!("u{uid}")
        } else {
            name.to_string()
        };
        if !host_users.iter().any(|(n, _)| *n == shown) {
            passwd_extra.push_str(&format!("{shown}:x:{uid}:{gid}::/root:/bin/bash\n"));
        }
        if !host_groups.iter().any(|(_, id)| *id == gid) {
            group_extra.push_str(&format!("{shown}:x:{gid}:\n"));
        }
        users.insert(
            spec.to_string(),
            TrialUser {
                name: shown,
                uid,
                gid,
            },
        );
    }
    write_user_database(paths, &passwd, &passwd_extra, &group, &group_extra)?;
    Ok(users)
}

/// The trial's copies of `/etc/passwd` and `/etc/group`: the host's, with the lines of the
/// task's users and groups added.
fn write_user_database(
    paths: &TrialPaths,
    passwd: &str,
    passwd_extra: &str,
    group: &str,
    group_extra: &str,
) -> Result<(), String> {
    let with_newline = |s: &str| {
        if s.is_empty() || s.ends_with('\n') {
            s.to_string()
        } else {
            format!("{s}\n")
        }
    };
    std::fs::create_dir_all(&paths.identity)
        .and_then(|()| {
            std::fs::write(
                paths.identity.join("passwd"),
                with_newline(passwd) + passwd_extra,
            )
        })
        .and_then(|()| {
            std::fs::write(
                paths.identity.join("group"),
                with_newline(group) + group_extra,
            )
        })
        .map_err(|e| format!("cannot write the trial's user database: {e}"))
}
