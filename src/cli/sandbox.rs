//! `baton sandbox [--sandbox MODE] [--network] [--write DIR]… -- CMD…`: runs one command in the
//! same sandbox the shell tool uses, in the current directory as the workspace. Also
//! `baton sandbox --probe`: what the kernel can enforce.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;

use crate::protocol::SandboxMode;
use crate::sandbox::{SandboxPolicy, Session, probe, sandboxed_command};

/// Arguments of `baton sandbox`.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Policy: read-only, workspace-write or off (the global `--sandbox` flag).
    #[arg(skip)]
    pub mode: SandboxMode,
    /// Allow network access (AF_INET/AF_INET6 sockets).
    #[arg(long)]
    pub network: bool,
    /// Another writable directory (repeatable).
    #[arg(long = "write", value_name = "DIR")]
    pub write: Vec<PathBuf>,
    /// Workspace root (the global `-C/--cd` flag; default: the current directory).
    #[arg(skip)]
    pub workspace: Option<PathBuf>,
    /// Print what the kernel can enforce and exit.
    #[arg(long, conflicts_with = "command")]
    pub probe: bool,
    /// The command and its arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

/// Runs `baton sandbox`; returns the command's exit code (128+N when killed by signal N),
/// or 1 when the sandbox could not be set up.
pub fn run(args: SandboxArgs) -> i32 {
    if args.probe {
        let support = probe();
        for line in support.report() {
            println!("{line}");
        }
        return if support.enforceable { 0 } else { 1 };
    }
    if args.command.is_empty() {
        eprintln!("baton sandbox: no command given (usage: baton sandbox [OPTIONS] -- CMD…)");
        return 2;
    }
    let workspace = match args
        .workspace
        .clone()
        .map_or_else(std::env::current_dir, Ok)
    {
        Ok(w) => w,
        Err(e) => {
            eprintln!("baton sandbox: no current directory: {e}");
            return 1;
        }
    };
    let workspace = match workspace.canonicalize() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("baton sandbox: workspace {}: {e}", workspace.display());
            return 1;
        }
    };
    let mut policy = SandboxPolicy::new(args.mode, &workspace).network(args.network);
    for w in args.write {
        policy = policy.writable_dir(w);
    }
    let (mut cmd, guard) = match sandboxed_command(&policy, &args.command, Session::Inherit) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("baton sandbox: {e}");
            return 1;
        }
    };
    cmd.current_dir(&workspace);
    // Like `env` or `timeout`: Ctrl-C goes to the command; we wait for it and clean up.
    // SAFETY: setting signal dispositions to ignore; the child resets them before exec.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("baton sandbox: running {:?}: {e}", args.command[0]);
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    drop(guard);
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}
