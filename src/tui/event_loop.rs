//! The interactive loop: terminal input, agent events, signals and timers in, frames out. Frames
//! are drawn only when something changed (at most one per 8 ms); the spinner ticks only while the
//! agent works, so an idle UI uses no CPU.

use crate::protocol::stdio::eprintln;
use std::io::stdout;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossterm::event::Event as TermEvent;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use tokio::sync::mpsc;

use super::app::{App, Effect};
use super::cell::NoticeLevel;
use super::input_reader::InputReader;
use super::options::TuiOptions;
use super::status::Phase;
use super::{clipboard, print_exit, render, terminal};
use crate::protocol::{AgentHandle, Op};

const MIN_FRAME: Duration = Duration::from_millis(8);
const SPINNER_TICK: Duration = Duration::from_millis(80);
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

type Term = Terminal<CrosstermBackend<std::io::Stdout>>;

pub async fn run(handle: AgentHandle, opts: TuiOptions) -> anyhow::Result<i32> {
    let AgentHandle { ops, mut events } = handle;
    let mut app = App::new(opts, Instant::now());
    std::thread::spawn(super::highlight::warm_up);
    terminal::install_panic_hook();
    terminal::enter(app.mouse_capture)?;
    let result = run_loop(&mut app, &ops, &mut events).await;
    terminal::restore();
    let width = crossterm::terminal::size()
        .map(|(w, _)| w)
        .unwrap_or(100)
        .max(20);
    let _ = print_exit::print_transcript(&app, width, &mut stdout());
    if let Some(id) = &app.session_id {
        // After the transcript, so it is the last thing on the screen.
        eprintln!("To continue this session: baton --resume {id}");
    }
    match result {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("baton: {e:#}");
            Ok(1)
        }
    }
}

async fn run_loop(
    app: &mut App,
    ops: &mpsc::UnboundedSender<Op>,
    events: &mut mpsc::UnboundedReceiver<crate::protocol::Event>,
) -> anyhow::Result<i32> {
    let mut term: Term = Terminal::new(CrosstermBackend::new(stdout()))?;
    term.clear()?;
    let (in_tx, mut in_rx) = mpsc::unbounded_channel();
    let reader = InputReader::spawn(in_tx);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut input_gone = false;
    let mut exit_code = 0;
    let mut core_gone = false;
    let mut last_draw = Instant::now() - MIN_FRAME;
    let mut dirty = true;

    // Ops queued by App::new (the initial prompt) go out before the first frame.
    run_effects(app, ops, &mut term, &reader).await?;
    loop {
        let now = Instant::now();
        if app.expire_hint(now) {
            dirty = true;
        }
        if dirty && now.duration_since(last_draw) >= MIN_FRAME {
            app.now = now;
            term.draw(|f| render::render(app, f))?;
            app.frame_drawn(now);
            last_draw = now;
            dirty = false;
        }
        let animating = app.status.working
            || !matches!(app.status.phase, Phase::Idle)
            || app.shutdown_started.is_some();
        let wait = if dirty {
            MIN_FRAME.saturating_sub(now.duration_since(last_draw))
        } else if animating {
            SPINNER_TICK
        } else {
            Duration::from_secs(3600)
        };
        // A timed hint ("press Ctrl+C again") is taken down on time even when nothing else
        // happens.
        let wait = match app.next_deadline() {
            Some(at) => wait.min(at.saturating_duration_since(now)),
            None => wait,
        };
        tokio::select! {
            ev = in_rx.recv(), if !input_gone => {
                match ev {
                    // Each event at the moment it was read (keys typed before an approval
                    // armed stay typed ahead; a double Ctrl+C stays double however late it
                    // is handled).
                    Some((at, ev)) => {
                        app.now = at;
                        handle_terminal_event(app, ev);
                        while let Ok((at, ev)) = in_rx.try_recv() {
                            app.now = at;
                            handle_terminal_event(app, ev);
                        }
                    }
                    // The terminal went away: save and leave.
                    None => {
                        app.now = Instant::now();
                        input_gone = true;
                        app.request_quit();
                    }
                }
                dirty = true;
            }
            ev = events.recv(), if !core_gone => {
                app.now = Instant::now();
                match ev {
                    Some(ev) => {
                        app.handle_event(ev);
                        // Batch what already arrived: one frame for a burst of deltas.
                        for _ in 0..4096 {
                            match events.try_recv() {
                                Ok(ev) => app.handle_event(ev),
                                Err(_) => break,
                            }
                        }
                    }
                    None => {
                        core_gone = true;
                        if app.shutdown_started.is_some() {
                            app.exit = Some(0);
                        } else {
                            app.push_notice(NoticeLevel::Error, "The agent core stopped unexpectedly", vec!["Your session file keeps what was saved. Press Ctrl+C to leave.".into()]);
                            app.status.working = false;
                            app.status.phase = Phase::Idle;
                            exit_code = 1;
                        }
                    }
                }
                dirty = true;
            }
            _ = sigterm.recv() => {
                app.request_quit();
                exit_code = 143;
                dirty = true;
            }
            _ = sighup.recv() => {
                app.request_quit();
                exit_code = 129;
                input_gone = true;
            }
            _ = tokio::time::sleep(wait) => {
                let now = Instant::now();
                // An approval that just armed is redrawn with its answers.
                let arming = app.next_deadline().is_some_and(|at| at <= now);
                if animating || app.expire_hint(now) || arming {
                    dirty = true;
                }
            }
        }
        app.now = Instant::now();
        run_effects(app, ops, &mut term, &reader).await?;
        if let Some(started) = app.shutdown_started
            && (app.now.saturating_duration_since(started) >= SHUTDOWN_WAIT || core_gone)
        {
            app.exit.get_or_insert(exit_code);
        }
        if let Some(code) = app.exit {
            reader.stop();
            return Ok(if exit_code != 0 { exit_code } else { code });
        }
    }
}

fn handle_terminal_event(app: &mut App, ev: TermEvent) {
    match ev {
        TermEvent::Key(key) => app.handle_key(key),
        TermEvent::Paste(text) => app.handle_paste(&text),
        TermEvent::Mouse(m) => app.handle_mouse(m),
        TermEvent::FocusGained => app.focused = true,
        TermEvent::FocusLost => app.focused = false,
        // Resize: the next draw adapts (ratatui resizes its buffers; caches are keyed by width).
        _ => {}
    }
}

async fn run_effects(
    app: &mut App,
    ops: &mpsc::UnboundedSender<Op>,
    term: &mut Term,
    reader: &InputReader,
) -> anyhow::Result<()> {
    for effect in app.take_effects() {
        match effect {
            Effect::Op(op) => {
                if ops.send(op).is_err() && app.shutdown_started.is_some() {
                    app.exit.get_or_insert(0);
                }
            }
            Effect::Copy(text) => {
                if let Err(e) = clipboard::copy_osc52(&text) {
                    app.push_notice(
                        NoticeLevel::Error,
                        format!("/copy: cannot write to the terminal: {e}"),
                        vec![],
                    );
                }
            }
            Effect::Notify(text) => {
                // A lost notification is not worth a notice in the transcript.
                let _ = terminal::notify(&text);
            }
            Effect::SetMouseCapture(on) => {
                if let Err(e) = terminal::set_mouse_capture(on) {
                    app.push_notice(NoticeLevel::Warning, format!("mouse capture: {e}"), vec![]);
                }
            }
            Effect::OpenEditor(text) => {
                reader.pause();
                terminal::restore();
                let edited = edit_in_editor(&text, &app.opts.workspace).await;
                terminal::enter(app.mouse_capture)?;
                reader.resume();
                term.clear()?;
                match edited {
                    Ok(t) => {
                        app.composer.set_text(t.trim_end_matches('\n'));
                        app.refresh_popup();
                    }
                    Err(e) => app.push_notice(NoticeLevel::Error, e, vec![]),
                }
            }
        }
    }
    Ok(())
}

/// The first of the editor's arguments that may lead where commands write: a path in a
/// writable root, or a pattern or variable the editor expands itself (vim globs and expands
/// `-S`'s file name), where no rule can tell where it leads.
fn refused_editor_word<'a>(args: &'a [String], roots: &[std::path::PathBuf]) -> Option<&'a String> {
    args.iter().find(|w| {
        w.contains(['*', '?', '[', '$', '`'])
            || crate::protocol::host_programs::names_a_writable_path(
                std::ffi::OsStr::new(w),
                roots,
                true,
            )
    })
}

/// Opens `$VISUAL` / `$EDITOR` (default `vi`) on a temp file holding `text`. The editor runs
/// outside the sandbox, so it is looked up as every program baton starts itself: never from a
/// PATH entry a command could have written (an activated `.venv/bin` in the workspace), with
/// such entries and code-loading variables scrubbed from its environment, and started in a
/// folder no command could have written.
async fn edit_in_editor(text: &str, workspace: &std::path::Path) -> Result<String, String> {
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    let argv = shlex::split(&editor)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("$EDITOR '{editor}' cannot be parsed"))?;
    let file = tempfile::Builder::new()
        .prefix("baton-prompt-")
        .suffix(".md")
        .tempfile()
        .map_err(|e| format!("cannot create a temp file for the editor: {e}"))?;
    let path: PathBuf = file.path().to_path_buf();
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    use crate::protocol::host_programs;
    let roots = host_programs::writable_roots_with(workspace);
    let program = host_programs::find_program(&argv[0], &roots).ok_or_else(|| {
        format!(
            "editor '{}' was not found in PATH outside the folders commands may write",
            argv[0]
        )
    })?;
    // Its arguments too: `sh <ws>/tools/edit.sh` runs what a command wrote (round 29), and
    // a pattern the editor expands itself (`vim -S ~/pro?/x.vim`, round 33) may name one: no
    // rule tells where a pattern leads, so an editor with one is not started.
    if let Some(word) = refused_editor_word(&argv[1..], &roots) {
        return Err(format!(
            "the editor '{editor}' names '{word}', a pattern or a path in a folder commands may \
             write: baton does not start it outside the sandbox (put the command in a script of \
             yours and name that)"
        ));
    }
    let mut cmd = tokio::process::Command::new(&program);
    let start = host_programs::neutral_dir(&roots);
    // The short list of baton's variables every program started outside the sandbox gets
    // (a `VIMINIT` or `GIT_SSH_COMMAND` naming what a command wrote, however spelled, stays
    // out); `PWD` says where it starts, not baton's own folder (round 31: a vim set-up
    // reading `$PWD` loaded the workspace's file).
    cmd.args(&argv[1..])
        .arg(&path)
        .current_dir(&start)
        .env_clear()
        .envs(host_programs::host_program_environment(&roots))
        .env("PWD", &start);
    let status = cmd
        .status()
        .await
        .map_err(|e| format!("cannot start editor '{}': {e}", argv[0]))?;
    if !status.success() {
        return Err(format!(
            "editor '{}' exited with {status}; prompt unchanged",
            argv[0]
        ));
    }
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Red team round 33 (high): `vim -S ~/pro?/x.vim` globbed to a file a command wrote in
    /// the workspace `~/proj`, which no path rule recognised; a pattern or a variable among
    /// the editor's arguments keeps it from starting, as a path in a writable root does.
    #[test]
    fn an_editor_whose_arguments_may_lead_into_the_workspace_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().canonicalize().unwrap().join("proj");
        std::fs::create_dir_all(&ws).unwrap();
        let roots = vec![ws.clone()];
        let words = |line: &str| shlex::split(line).unwrap();
        let home = ws.parent().unwrap().display().to_string();
        for refused in [
            format!("-S {home}/pro?/x.vim"),
            format!("-S {home}/*/x.vim"),
            format!("-S {home}/pr[o]j/x.vim"),
            "-S $TMPDIR/../proj/x.vim".to_string(),
            format!("-S {}/x.vim", ws.display()),
        ] {
            assert!(
                refused_editor_word(&words(&refused), &roots).is_some(),
                "{refused}"
            );
        }
        for kept in ["--wait", "-w", "+startinsert", "-t -a ''"] {
            assert_eq!(refused_editor_word(&words(kept), &roots), None, "{kept}");
        }
    }
}
