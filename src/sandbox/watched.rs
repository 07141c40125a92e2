//! The one way baton starts a command in the sandbox with what git trusts watched: the
//! command is prepared and held at its [`StartGate`] while bubblewrap builds its world, what
//! git and baton trust is looked at meanwhile (before the spawn where the backend cannot hold
//! it), and once the command has ended, what it planted where no read-only bind reached is
//! undone ([`GitWatch::audit`]). The shell tools and `baton sandbox` both start commands here.

use std::process::Command;
use std::sync::Arc;

use super::git_guard::{self, AuditSnapshot};
use super::launch::{PreparedSandbox, Session, StartGate};
use super::pidns::CommandEnd;
use super::policy::SandboxPolicy;
use super::{SandboxError, prepared_command};

/// What git trusted before one command, and the gate that holds it until that is known.
pub struct GitWatch {
    policy: SandboxPolicy,
    gate: Option<StartGate>,
    end: Option<CommandEnd>,
    before: Option<AuditSnapshot>,
}

/// `argv` prepared under `policy`, held at its gate where the backend can hold it. The caller
/// spawns the command (installing the sandbox's hook, or with
/// [`PreparedSandbox::spawn_alone`]), then calls [`GitWatch::started`] at once, and
/// [`GitWatch::audit`] once it has ended.
pub fn watched_command(
    policy: &SandboxPolicy,
    argv: &[String],
    session: Session,
) -> Result<(Command, Arc<PreparedSandbox>, GitWatch), SandboxError> {
    watched_command_admitted(policy, argv, session, || true)
}

/// [`watched_command`], with the caller's own check (`admitted`: whether the workspace may be
/// one) run beside the look at what the sandbox shows, before anything is made on disk:
/// [`SandboxError::NotAdmitted`] when it says no.
pub fn watched_command_admitted(
    policy: &SandboxPolicy,
    argv: &[String],
    session: Session,
    admitted: impl FnOnce() -> bool + Send,
) -> Result<(Command, Arc<PreparedSandbox>, GitWatch), SandboxError> {
    let mut held = None;
    let (prepared, cmd) = prepared_command(policy, argv, session, admitted, |p| {
        held = p.hold()?;
        Ok(())
    })?;
    let (gate, end) = held.unzip();
    // A backend that cannot hold the command has what git trusts looked at before the spawn.
    let before = gate.is_none().then(|| git_guard::snapshot(policy));
    let watch = GitWatch {
        policy: policy.clone(),
        gate,
        end,
        before,
    };
    Ok((cmd, Arc::new(prepared), watch))
}

impl GitWatch {
    /// Right after the spawn: looks at what git trusts while bubblewrap builds the world, then
    /// lets the command run. A command whose setup failed already is reported by its status.
    pub fn started(&mut self) {
        if let Some(mut gate) = self.gate.take() {
            gate.spawned();
            self.before = Some(git_guard::snapshot(&self.policy));
            if let Some(end) = &mut self.end {
                end.learn_init();
            }
            let _ = gate.open();
        }
    }

    /// Blocks until no process of the command can do anything more — not merely killed: a
    /// process asleep in the kernel (a `rename` waiting on a lock) completes that call when
    /// it wakes, however long after its kill. With a pids cgroup every member is killed until
    /// none is left outside the kernel's exit path; without one, under bubblewrap, until the
    /// sandbox's init is gone (the kernel ends it only after the rest of its pid namespace).
    /// The audit must come after this.
    pub fn wait_until_gone(&self, sandbox: &PreparedSandbox) {
        if let Some(cgroup) = sandbox.cgroup() {
            cgroup.wait_gone();
        } else if let Some(end) = &self.end {
            end.wait_init_gone();
        }
    }

    /// Where the backend reports the command's end before its own teardown (bubblewrap):
    /// poll it for [`GitWatch::try_ended`]. `None` where only the process's exit tells.
    pub fn end_report(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.end.as_ref().map(CommandEnd::fd)
    }

    /// [`GitWatch::ended`] without blocking: `None` while the command may still run.
    pub fn try_ended(&mut self) -> Option<Option<i32>> {
        self.end.as_mut().map_or(Some(None), CommandEnd::try_ended)
    }

    /// Blocks until the backend reports that the command's own process has ended, and
    /// returns its exit status (128 + the signal for a killed one); after
    /// [`GitWatch::wait_until_gone`], [`GitWatch::audit`] may run while the sandbox is still
    /// being taken down. `None` where
    /// the backend reports nothing (the sandbox off, Landlock), or it ended without a report
    /// (a setup that failed): then only the process's exit says the command is over. Call it
    /// after [`GitWatch::started`]: until then baton holds a write end of the report's pipe.
    pub fn ended(&mut self) -> Option<i32> {
        self.end.as_mut()?.ended()
    }

    /// Once nothing of the command can write any more: undoes git config, hooks and
    /// `.baton/` files it planted, one warning for the user each. Nothing when it was never
    /// started.
    pub fn audit(&self) -> Vec<String> {
        match &self.before {
            Some(before) => git_guard::audit(before, &self.policy),
            None => Vec::new(),
        }
    }
}
