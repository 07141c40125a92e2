//! The progress line on stderr: a bar with done / running / passed / failed / errors, redrawn
//! in place on a terminal, one line per finished trial otherwise (CI logs).

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    done: usize,
    running: usize,
    passed: usize,
    failed: usize,
    errors: usize,
    finished: bool,
}

/// Shared by the workers; cheap to clone.
#[derive(Clone)]
pub struct Progress {
    inner: Arc<(Mutex<Counts>, Condvar)>,
    total: usize,
    start: Instant,
    tty: bool,
    enabled: bool,
}

/// How a trial ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    Passed,
    Failed,
    Error,
}

impl Progress {
    pub fn new(total: usize, enabled: bool) -> Progress {
        Progress {
            inner: Arc::new((Mutex::new(Counts::default()), Condvar::new())),
            total,
            start: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            enabled,
        }
    }

    /// Starts the redraw thread on a terminal. Join the handle after `finish`.
    pub fn spawn_renderer(&self) -> Option<std::thread::JoinHandle<()>> {
        if !self.enabled || !self.tty {
            return None;
        }
        let me = self.clone();
        Some(std::thread::spawn(move || {
            let (lock, cv) = &*me.inner;
            let mut counts = lock.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                me.draw(&counts);
                if counts.finished {
                    break;
                }
                counts = cv
                    .wait_timeout(counts, Duration::from_millis(250))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            eprint!("\r\x1b[2K");
        }))
    }

    pub fn started(&self) {
        let (lock, cv) = &*self.inner;
        lock.lock().unwrap_or_else(|p| p.into_inner()).running += 1;
        cv.notify_all();
    }

    pub fn finished(&self, trial: &str, how: Finish, detail: &str) {
        let (lock, cv) = &*self.inner;
        let mut c = lock.lock().unwrap_or_else(|p| p.into_inner());
        c.running = c.running.saturating_sub(1);
        c.done += 1;
        match how {
            Finish::Passed => c.passed += 1,
            Finish::Failed => c.failed += 1,
            Finish::Error => c.errors += 1,
        }
        if self.enabled && !self.tty {
            let word = match how {
                Finish::Passed => "passed",
                Finish::Failed => "failed",
                Finish::Error => "error",
            };
            let line = format!("[{}/{}] {trial}: {word} {detail}", c.done, self.total);
            eprintln!("{}", crate::protocol::terminal_safe_line(&line));
        }
        cv.notify_all();
    }

    pub fn finish(&self) {
        let (lock, cv) = &*self.inner;
        lock.lock().unwrap_or_else(|p| p.into_inner()).finished = true;
        cv.notify_all();
    }

    fn draw(&self, c: &Counts) {
        const WIDTH: usize = 24;
        let filled = (c.done * WIDTH).checked_div(self.total).unwrap_or(WIDTH);
        let secs = self.start.elapsed().as_secs();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K[{}{}] {}/{} done · {} running · {} passed · {} failed · {} errors · {}m{:02}s",
            "#".repeat(filled),
            "-".repeat(WIDTH - filled),
            c.done,
            self.total,
            c.running,
            c.passed,
            c.failed,
            c.errors,
            secs / 60,
            secs % 60
        );
        let _ = err.flush();
    }
}
