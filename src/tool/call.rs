//! Plumbing shared by the file, search and git tools: typed arguments from the model's JSON,
//! running blocking filesystem work off the async runtime, and capping text for the model.

use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;

use super::{ToolContext, ToolError, ToolResult};

/// Parses a tool's arguments into its typed form; the error names the tool and the problem.
pub fn parse_args<T: DeserializeOwned>(
    tool: &str,
    args: &serde_json::Value,
) -> Result<T, ToolError> {
    // Some models send the arguments as a JSON string instead of an object.
    let value = match args {
        serde_json::Value::String(text) => {
            serde_json::from_str(text).map_err(|source| ToolError::ArgumentsNotJson {
                tool: tool.to_string(),
                source,
            })?
        }
        other => other.clone(),
    };
    serde_json::from_value(value).map_err(|source| ToolError::Arguments {
        tool: tool.to_string(),
        source,
    })
}

/// Runs `work` on the blocking pool: filesystem walks, git and parsing must not stall the
/// runtime that streams model output. Work still running [`CANCEL_GRACE`] after the call is
/// cancelled is left behind, so that work held in the kernel (libgit2 opening a FIFO a
/// command left in a gitdir, where nothing is looked at first) cannot hold the turn; work
/// that ends within it gives its own result.
pub fn run_blocking<'a, F>(ctx: &'a ToolContext, work: F) -> BoxFuture<'a, ToolResult>
where
    F: FnOnce(&ToolContext) -> ToolResult + Send + 'static,
{
    let cancel = ctx.cancel.clone();
    let ctx = ctx.clone();
    Box::pin(async move {
        let task = tokio::task::spawn_blocking(move || work(&ctx));
        let given_up = async {
            cancel.cancelled().await;
            tokio::time::sleep(CANCEL_GRACE).await;
        };
        tokio::select! {
            joined = task => match joined {
                Ok(result) => result,
                Err(e) => ToolResult::error(format!("tool task failed: {e}")),
            },
            () = given_up => ToolResult::error(format!(
                "cancelled: the tool had not finished {} s after the stop, and was left \
                 running (what it does may still happen)",
                CANCEL_GRACE.as_secs()
            )),
        }
    })
}

/// How long a cancelled tool call's work is waited for before it is left behind.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Turns a tool's outcome into its result: the error's text is what the model reads, and its
/// kind picks the status.
pub fn into_result(outcome: Result<String, ToolError>) -> ToolResult {
    match outcome {
        Ok(text) => ToolResult::ok(text),
        Err(e) => e.into(),
    }
}

/// Keeps the head and tail of `text` within `cap` bytes, with a line saying what was dropped.
pub fn cap_text(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let half = cap / 2;
    let head_end = floor_char_boundary(&text, half);
    let tail_start = ceil_char_boundary(&text, text.len() - half);
    let dropped = &text[head_end..tail_start];
    let dropped_lines = dropped.matches('\n').count();
    format!(
        "{}\n[... {} bytes ({} lines) dropped ...]\n{}",
        &text[..head_end],
        dropped.len(),
        dropped_lines,
        &text[tail_start..]
    )
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while index > 0 && !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn ceil_char_boundary(text: &str, mut index: usize) -> usize {
    while index < text.len() && !text.is_char_boundary(index) {
        index += 1;
    }
    index
}

/// Truncates one line for display, marking the cut.
pub fn clip_line(line: &str, max_chars: usize) -> String {
    match line.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}… [line truncated]", &line[..cut]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> ToolContext {
        let (events, _rx) = crate::protocol::EventSink::channel();
        ToolContext {
            workspace: std::env::temp_dir(),
            call_id: "c".into(),
            events,
            cancel: Default::default(),
            state: Default::default(),
        }
    }

    /// Round 26: a walk held in the kernel (an open of a FIFO) held its turn for good, Ctrl-C
    /// and SIGTERM included. A cancelled call answers after the grace; work that ends within
    /// it gives its own result.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_call_does_not_wait_for_work_held_in_the_kernel() {
        let ctx = context();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let call = run_blocking(&ctx, move |_| {
            let _ = held.recv();
            ToolResult::ok("finished".to_string())
        });
        ctx.cancel.cancel();
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(std::time::Duration::from_secs(20), call)
            .await
            .expect("the cancelled call answers");
        assert!(result.content.contains("cancelled"), "{}", result.content);
        assert!(started.elapsed() >= CANCEL_GRACE);
        release.send(()).expect("the work is still there");

        let ctx = context();
        ctx.cancel.cancel();
        let result = run_blocking(&ctx, |_| ToolResult::ok("finished".to_string())).await;
        assert_eq!(result.content, "finished");
    }

    #[test]
    fn cap_text_keeps_head_and_tail_and_counts_dropped() {
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let capped = cap_text(text.clone(), 200);
        assert!(capped.starts_with("line 0\n"));
        assert!(capped.ends_with("line 999\n"));
        assert!(capped.contains("bytes ("));
        assert!(capped.len() < 300);
    }

    #[test]
    fn parse_args_accepts_a_json_string() {
        #[derive(serde::Deserialize)]
        struct A {
            path: String,
        }
        let a: A = parse_args("t", &serde_json::json!("{\"path\":\"x\"}")).unwrap();
        assert_eq!(a.path, "x");
        let err = parse_args::<A>("t", &serde_json::json!({})).err().unwrap();
        assert!(matches!(err, ToolError::Arguments { .. }), "{err}");
        assert!(err.to_string().contains("missing field `path`"), "{err}");
        let err = parse_args::<A>("t", &serde_json::json!("{nope"))
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .starts_with("invalid arguments for t: not a JSON object: "),
            "{err}"
        );
    }
}
