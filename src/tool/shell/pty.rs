//! A pseudo-terminal for one command: the master side (close-on-exec from the moment it exists,
//! so no other child spawned meanwhile inherits it and keeps the terminal alive past its
//! command), the slave side opened by name without becoming baton's controlling terminal, and
//! the window size the command sees. The child makes the slave its controlling terminal itself
//! (`Session::PtyLeader` in the sandbox launcher).

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use nix::fcntl::OFlag;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};

use crate::tool::ToolError;

/// Both ends of a fresh PTY.
pub struct Pty {
    /// Read the command's output here, write its input here.
    pub master: File,
    /// The command's stdin, stdout and stderr; drop it once the command started, so reading the
    /// master ends (EIO) when the last process holding the slave exits.
    pub slave: File,
}

/// Rows and columns the command sees (`stty size`, `$LINES`/`$COLUMNS` of most programs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    pub rows: u16,
    pub cols: u16,
}

impl Pty {
    /// Opens a PTY pair with the given window size.
    pub fn open(size: WindowSize) -> Result<Pty, ToolError> {
        let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
            .map_err(|e| failed("opening a PTY", e.into()))?;
        grantpt(&master).map_err(|e| failed("opening a PTY (grantpt)", e.into()))?;
        unlockpt(&master).map_err(|e| failed("opening a PTY (unlockpt)", e.into()))?;
        let name = ptsname_r(&master).map_err(|e| failed("naming the PTY", e.into()))?;
        // std opens with O_CLOEXEC; O_NOCTTY keeps baton's own terminal (if any) its own.
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&name)
            .map_err(|e| failed(&format!("opening {name}"), e))?;
        let pty = Pty {
            master: File::from(OwnedFd::from(master)),
            slave,
        };
        pty.set_window_size(size)?;
        Ok(pty)
    }

    /// Sets the window size (TIOCSWINSZ); the command's foreground group gets SIGWINCH.
    pub fn set_window_size(&self, size: WindowSize) -> Result<(), ToolError> {
        set_window_size(&self.master, size).map_err(|e| failed("setting the PTY window size", e))
    }
}

/// Sets the window size of the terminal `fd` (a PTY's master).
pub fn set_window_size(fd: impl AsFd, size: WindowSize) -> std::io::Result<()> {
    let ws = rustix::termios::Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(fd, ws).map_err(std::io::Error::from)
}

/// The window size of the terminal `fd`, when it is one and has a size.
pub fn window_size_of(fd: impl AsFd) -> Option<WindowSize> {
    let ws = rustix::termios::tcgetwinsize(fd).ok()?;
    (ws.ws_row > 0).then_some(WindowSize {
        rows: ws.ws_row,
        cols: ws.ws_col,
    })
}

fn failed(step: &str, source: std::io::Error) -> ToolError {
    ToolError::Terminal {
        step: step.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn cloexec(f: &File) -> bool {
        rustix::io::fcntl_getfd(f).is_ok_and(|flags| flags.contains(rustix::io::FdFlags::CLOEXEC))
    }

    fn window_size(f: &File) -> (u16, u16) {
        let size = window_size_of(f).expect("TIOCGWINSZ");
        (size.rows, size.cols)
    }

    #[test]
    fn both_ends_are_close_on_exec_and_carry_the_window_size() {
        let pty = Pty::open(WindowSize {
            rows: 48,
            cols: 160,
        })
        .expect("pty");
        assert!(cloexec(&pty.master) && cloexec(&pty.slave));
        assert_eq!(window_size(&pty.slave), (48, 160));
        pty.set_window_size(WindowSize { rows: 10, cols: 33 })
            .expect("resize");
        assert_eq!(window_size(&pty.slave), (10, 33));
    }

    #[test]
    fn data_flows_both_ways_and_the_master_ends_when_the_slave_closes() {
        let Pty {
            mut master,
            mut slave,
        } = Pty::open(WindowSize { rows: 24, cols: 80 }).expect("pty");
        master.write_all(b"hi\n").expect("write master");
        let mut buf = [0u8; 64];
        let n = slave.read(&mut buf).expect("read slave");
        assert_eq!(&buf[..n], b"hi\n");
        slave.write_all(b"out").expect("write slave");
        // The echo of "hi" comes first.
        let mut got = Vec::new();
        while !got.ends_with(b"out") {
            let n = master.read(&mut buf).expect("read master");
            assert!(n > 0 && got.len() < 64, "{got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        drop(slave);
        // Linux reports the hang-up as EIO; other systems as end of file.
        match master.read(&mut buf) {
            Ok(0) => {}
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}"),
            Ok(n) => panic!("read {n} bytes after the slave closed"),
        }
    }
}
