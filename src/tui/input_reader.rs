//! Reads terminal input on its own thread and forwards it to the event loop. It can be paused and
//! waits until it is parked, so an external editor (Ctrl+G) gets every keystroke: crossterm's
//! `poll` buffers input bytes itself, so merely not calling `read` would not be enough. Each
//! event goes with the moment it was read: a double Ctrl+C is judged by when the keys came,
//! not by when a busy event loop got to them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossterm::event::{self, Event as TermEvent};
use tokio::sync::mpsc::UnboundedSender;

pub struct InputReader {
    paused: Arc<AtomicBool>,
    parked: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

/// How long `poll` blocks; bounds pause latency, and is idle time in the kernel (no busy loop).
const POLL: Duration = Duration::from_millis(200);

impl InputReader {
    pub fn spawn(tx: UnboundedSender<(Instant, TermEvent)>) -> InputReader {
        let paused = Arc::new(AtomicBool::new(false));
        let parked = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, k, s) = (paused.clone(), parked.clone(), stop.clone());
        std::thread::Builder::new()
            .name("baton-tui-input".into())
            .spawn(move || {
                while !s.load(Ordering::SeqCst) {
                    if p.load(Ordering::SeqCst) {
                        k.store(true, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    k.store(false, Ordering::SeqCst);
                    match event::poll(POLL) {
                        Ok(true) => {
                            if p.load(Ordering::SeqCst) {
                                continue;
                            }
                            match event::read() {
                                Ok(ev) => {
                                    if tx.send((Instant::now(), ev)).is_err() {
                                        break;
                                    }
                                }
                                Err(_) => break,
                            }
                        }
                        Ok(false) => {}
                        Err(_) => break,
                    }
                }
            })
            .ok();
        InputReader {
            paused,
            parked,
            stop,
        }
    }

    /// Stops reading and waits (at most half a second) until the thread is out of `poll`.
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_millis(500);
        while !self.parked.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
