//! Git and `.baton/` as code-execution paths: which paths a sandboxed command may not write
//! (pinned read-only before it starts), and the audit that neutralizes what it planted where
//! nothing could be pinned (a new repository, a new nested repo behind a gitlink, a new
//! `.baton/`). Git runs programs named in its config (`core.fsmonitor`, `core.hooksPath`,
//! filters, aliases…), runs hooks, and follows `commondir` and `.git` files to other gitdirs;
//! anything a command leaves there runs later, outside the sandbox, when the user runs git.
//!
//! Before a command runs, [`protection`] says what is pinned and refused, [`TrustedFolders`]
//! answers the file tools and [`snapshot`] records what the audit compares; after it,
//! [`audit`] undoes what it planted. Beneath them: `roots` (the folders a command may write),
//! `gitdirs` (where git looks) and `config` (git's config format).

mod audit;
mod config;
mod gitdirs;
mod hook_managers;
mod protection;
mod roots;
mod snapshot;
mod trusted;

pub use audit::audit;
pub use gitdirs::gitdir_of;
pub use hook_managers::applies_below_the_top;
pub use protection::{Protection, protection};
pub use roots::program_roots;
pub use snapshot::{AuditSnapshot, snapshot};
pub use trusted::TrustedFolders;

/// The largest git config file read to show a command a copy without its credentials.
const MAX_SHOWN_CONFIG: u64 = 1 << 20;

/// The files of the user's own git configuration (global, XDG, system, the files
/// `GIT_CONFIG_GLOBAL`/`GIT_CONFIG_SYSTEM` name, and what they include) that hold a
/// credential, each with its text without them ([`config::without_credentials`]): what a
/// command is shown in their place. A file that cannot be read as a bounded regular file is
/// left out (the home view hides it or it is not the user's).
pub fn user_configs_without_credentials() -> Vec<(std::path::PathBuf, String)> {
    gitdirs::GitConfigs::user_files()
        .into_iter()
        .filter_map(|file| {
            let bytes = crate::untrusted_fs::read_following(&file, MAX_SHOWN_CONFIG).ok()?;
            let shown = config::without_credentials(&String::from_utf8_lossy(&bytes))?;
            Some((file, shown))
        })
        .collect()
}

/// A temporary workspace and its canonical path, for the tests of every part.
#[cfg(test)]
fn ws() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().canonicalize().expect("canonical");
    (d, p)
}
