//! Compaction by summary (the baton): when a long task no longer fits its expert's context
//! window, the older steps are replaced by a handoff summary the expert writes itself, the plan
//! and the files touched; old tool outputs shrink to head + tail before that is needed.
//!
//! The compacted form is append-only from there: new steps extend it, so prefix caches hit.

use crate::backend::ChatRequest;
use crate::mol::profile::Profile;
use crate::mol::timeline::{Compaction, Task, Timeline};
use crate::protocol::{ChatMessage, Role, ToolSpec};
use crate::protocol::{Expert, Hop};

/// Tokens the handoff summary may take.
pub const HANDOFF_MAX_TOKENS: u32 = 1024;
/// A tool output longer than this (bytes) is shrunk once it is old.
pub const SHRINK_ABOVE: usize = 1536;
/// Bytes kept at each end of a shrunk output.
const SHRINK_KEEP: usize = 512;
/// Tokens of margin left between the handoff summary's budget and the window.
const HANDOFF_MARGIN: u64 = 64;
/// The handoff summary never gets fewer tokens than this, even in a tiny window.
const HANDOFF_MIN_TOKENS: u64 = 128;

/// The final user message of a compaction request (documented in docs/context.md).
pub const HANDOFF_PROMPT: &str = "Your context is about to be compacted: the older steps of this task will be removed and replaced by a handoff summary that you write now, for yourself to continue from. Write it under these headings: Goal; Decisions made; Files touched and why; Plan state; Open problems; Still unknown. Be specific: exact file paths, commands, error messages, names and values you will need. Output only the summary.";

/// Tools whose calls change files (for the list of files touched).
const FILE_TOOLS: [&str; 3] = ["write_file", "edit", "apply_patch"];

/// The owner's messages of a task as its view shows them: the handoff (if compacted), then the
/// kept messages, with old tool outputs shrunk.
pub fn own_messages(task: &Task) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(task.messages.len() + 1);
    let start = match &task.compaction {
        Some(c) => {
            out.push(handoff_message(c));
            c.keep_from.min(task.messages.len())
        }
        None => 0,
    };
    let mut step = task.messages[..start]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .count();
    for (i, m) in task.messages.iter().enumerate().skip(start) {
        if m.role == Role::Tool {
            step += 1;
            if i < task.shrunk_before && m.content.len() > SHRINK_ABOVE {
                let mut shrunk = m.clone();
                shrunk.content = shrink_output(&m.content, step);
                out.push(shrunk);
                continue;
            }
        }
        out.push(m.clone());
    }
    out
}

/// The user message that stands for the compacted steps.
pub fn handoff_message(c: &Compaction) -> ChatMessage {
    let mut text = String::from("[Earlier steps of this task were compacted.]\n");
    if c.summary.trim().is_empty() {
        text.push_str("Handoff summary: unavailable (the summary request failed); the oldest tool outputs were dropped.\n");
    } else {
        text.push_str("Handoff summary:\n");
        text.push_str(c.summary.trim());
        text.push('\n');
    }
    if let Some(plan) = &c.plan {
        text.push_str("\nCurrent plan (verbatim):\n");
        text.push_str(plan);
        text.push('\n');
    }
    if !c.files_touched.is_empty() {
        text.push_str("\nFiles touched so far: ");
        text.push_str(&c.files_touched.join(", "));
        text.push('\n');
    }
    ChatMessage::user(text)
}

/// Head and tail of a long tool output, with a pointer to what was cut. The cuts fall on line
/// boundaries where a line ends within reach (half the kept size), so no line is shown in
/// part, and the pointer says which lines are missing and how to see them again.
pub fn shrink_output(content: &str, step: usize) -> String {
    if content.len() <= SHRINK_ABOVE {
        return content.to_string();
    }
    let mut head_end = floor_char_boundary(content, SHRINK_KEEP);
    if let Some(nl) = content[..head_end]
        .rfind('\n')
        .filter(|&nl| nl >= SHRINK_KEEP / 2)
    {
        head_end = nl + 1;
    }
    let mut tail_start = ceil_char_boundary(content, content.len() - SHRINK_KEEP);
    if let Some(nl) = content[tail_start..]
        .find('\n')
        .filter(|&nl| nl < SHRINK_KEEP / 2 && tail_start + nl + 1 < content.len())
    {
        tail_start += nl + 1;
    }
    let head = &content[..head_end];
    let tail = &content[tail_start..];
    let first = head.matches('\n').count() + 1;
    let last = first + content[head_end..tail_start].matches('\n').count();
    let lines = if head.ends_with('\n') && content[..tail_start].ends_with('\n') && last > first {
        format!("lines {first}–{} ", last - 1)
    } else {
        String::new()
    };
    format!(
        "{}{}[… output of step {step}, {}, truncated: {lines}left out; read the file again \
         (read_file with an offset) or re-run the command to see them …]\n{}",
        head,
        if head.ends_with('\n') { "" } else { "\n" },
        human_size(content.len()),
        tail
    )
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

fn human_size(bytes: usize) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
    } else if bytes >= 1024 {
        format!("{} KB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

/// A view with every long tool output cut to head and tail: the compaction request of a view
/// that no longer fits (its newest output is huge). The outputs stay whole in the timeline.
pub fn shrink_all_outputs(view: Vec<ChatMessage>) -> Vec<ChatMessage> {
    view.into_iter()
        .map(|mut m| {
            if m.role == Role::Tool && m.content.len() > SHRINK_ABOVE {
                let head_end = floor_char_boundary(&m.content, SHRINK_KEEP);
                let tail_start = ceil_char_boundary(&m.content, m.content.len() - SHRINK_KEEP);
                m.content = format!(
                    "{}\n[… {} cut for this summary request …]\n{}",
                    &m.content[..head_end],
                    human_size(m.content.len()),
                    &m.content[tail_start..]
                );
            }
            m
        })
        .collect()
}

/// The plan at the end of `messages`: the arguments of the last `update_plan` call, verbatim.
pub fn latest_plan(messages: &[ChatMessage]) -> Option<String> {
    messages
        .iter()
        .rev()
        .flat_map(|m| m.tool_calls.iter().rev())
        .find(|c| c.name == "update_plan")
        .map(|c| c.arguments.clone())
}

/// Files changed by the task's calls, in first-touched order, after those already recorded.
pub fn files_touched(task: &Task) -> Vec<String> {
    let mut files: Vec<String> = task
        .compaction
        .as_ref()
        .map(|c| c.files_touched.clone())
        .unwrap_or_default();
    let mut add = |path: &str| {
        let path = path.trim();
        if !path.is_empty() && !files.iter().any(|f| f == path) {
            files.push(path.to_string());
        }
    };
    for call in task.messages.iter().flat_map(|m| m.tool_calls.iter()) {
        if !FILE_TOOLS.contains(&call.name.as_str()) {
            continue;
        }
        let Ok(args) = serde_json::from_str::<serde_json::Value>(&call.arguments) else {
            continue;
        };
        if let Some(path) = args.get("path").and_then(|p| p.as_str()) {
            add(path);
        }
        for text in args.as_object().into_iter().flat_map(|o| o.values()) {
            let Some(text) = text.as_str() else { continue };
            for line in text.lines() {
                for marker in [
                    "*** Add File: ",
                    "*** Update File: ",
                    "*** Delete File: ",
                    "*** Move to: ",
                ] {
                    if let Some(path) = line.strip_prefix(marker) {
                        add(path);
                    }
                }
            }
        }
    }
    files
}

/// Where the verbatim tail starts when keeping the last `steps` assistant steps; `None` when
/// the task has no more steps than that (nothing to compact).
pub fn keep_from_for(task: &Task, steps: usize) -> Option<usize> {
    let starts: Vec<usize> = task
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant)
        .map(|(i, _)| i)
        .collect();
    if starts.len() <= steps {
        return None;
    }
    let keep_from = starts[starts.len() - steps.max(1)];
    let already = task.compaction.as_ref().map_or(0, |c| c.keep_from);
    (keep_from > already).then_some(keep_from)
}

/// The compaction request: the owner's current view (tool outputs shrunk) and the handoff
/// prompt. Greedy, not streamed, no tools, thinking off.
pub fn compaction_request(
    profile: &Profile,
    owner: Expert,
    view: Vec<ChatMessage>,
    tools: Vec<ToolSpec>,
) -> ChatRequest {
    let mut messages = view;
    messages.push(ChatMessage::user(HANDOFF_PROMPT));
    let mut req = ChatRequest::new(profile.adapter(owner), messages, Hop::Compaction);
    // The answer hop's tools, not to be called: the request is then the answer hop's prefix
    // plus one message, which an engine's prefix cache does not prefill again.
    if !tools.is_empty() {
        req.tool_choice = Some("none".into());
    }
    req.tools = tools;
    req.sampling.temperature = Some(0.0);
    req.stream = false;
    req.max_tokens = Some(HANDOFF_MAX_TOKENS);
    req.enable_thinking = Some(false);
    req
}

/// The compaction request of `owner`'s `view` (with `tools`, its answer hops' tools), sized so
/// the summary fits next to its prompt in `window` (`prompt_tokens` counts a request the way
/// the window is measured): a small window gets a shorter handoff, and a view whose newest
/// output is too large is sent with its long outputs cut, and then without the tools.
pub fn fitted_compaction_request(
    profile: &Profile,
    owner: Expert,
    view: Vec<ChatMessage>,
    tools: Vec<ToolSpec>,
    window: u64,
    prompt_tokens: impl Fn(&ChatRequest) -> u64,
) -> ChatRequest {
    let mut request = compaction_request(profile, owner, view, tools);
    let too_large =
        |r: &ChatRequest| prompt_tokens(r) + HANDOFF_MIN_TOKENS + HANDOFF_MARGIN > window;
    if too_large(&request) {
        request.messages = shrink_all_outputs(request.messages);
    }
    if too_large(&request) {
        request.tools.clear();
        request.tool_choice = None;
    }
    let room = window
        .saturating_sub(prompt_tokens(&request) + HANDOFF_MARGIN)
        .max(HANDOFF_MIN_TOKENS);
    request.max_tokens = request
        .max_tokens
        .map(|m| (m as u64).min(room) as u32)
        .or(Some(room.min(u32::MAX as u64) as u32));
    request
}

impl Timeline {
    /// Shows the task's tool outputs older than the last `keep_recent` results shrunk. Returns
    /// whether the view changed (a long output was cut); the view's prefix changes then, and
    /// stays append-only afterwards.
    pub fn shrink_old_tool_outputs(&mut self, task_id: u64, keep_recent: usize) -> bool {
        let Some(task) = self.task_mut(task_id) else {
            return false;
        };
        let tools: Vec<usize> = task
            .messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::Tool)
            .map(|(i, _)| i)
            .collect();
        if tools.len() <= keep_recent {
            return false;
        }
        let boundary = match keep_recent {
            0 => task.messages.len(),
            n => tools[tools.len() - n],
        };
        if boundary <= task.shrunk_before {
            return false;
        }
        // Only a long output that is still shown changes the view; moving the boundary over
        // short ones (or over compacted steps) changes nothing worth recording.
        let shown_from = task
            .shrunk_before
            .max(task.compaction.as_ref().map_or(0, |c| c.keep_from));
        let visible = task
            .messages
            .get(shown_from..boundary)
            .unwrap_or_default()
            .iter()
            .any(|m| m.role == Role::Tool && m.content.len() > SHRINK_ABOVE);
        // The boundary moves only with a visible change: a change is what gets recorded, and
        // a state moved without a record would differ from the one its file replays to.
        if visible {
            task.shrunk_before = boundary;
        }
        visible
    }

    /// Shows `owner`'s own closed tasks before `before` as user text + summary, like other
    /// experts' tasks. Returns whether that hides anything now (a task with a summary).
    pub fn fold_own_tasks(&mut self, owner: Expert, before: u64) -> bool {
        let hides = self.fold_hides(owner, before);
        if hides {
            self.folded_before.insert(owner, before);
        }
        hides
    }

    /// Replaces the task's steps before the last `keep_steps` by `summary` (empty = the summary
    /// failed: the steps are dropped and the handoff says so), keeping the plan and the files
    /// touched, and folds the owner's older closed tasks to their summaries.
    pub fn compact(&mut self, task_id: u64, summary: &str, keep_steps: usize) -> bool {
        let Some(task) = self.task(task_id) else {
            return false;
        };
        let Some(keep_from) = keep_from_for(task, keep_steps) else {
            return false;
        };
        let owner = task.owner;
        let plan = latest_plan(&task.messages[..keep_from])
            .or_else(|| task.compaction.as_ref().and_then(|c| c.plan.clone()));
        let files = files_touched(task);
        let count = task.compaction.as_ref().map_or(0, |c| c.count) + 1;
        if let Some(task) = self.task_mut(task_id) {
            task.compaction = Some(Compaction {
                summary: summary.trim().to_string(),
                plan,
                files_touched: files,
                keep_from,
                count,
            });
        }
        self.folded_before.insert(owner, task_id);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolCall;

    fn call(id: &str, name: &str, args: &str) -> ChatMessage {
        let mut m = ChatMessage::assistant("");
        m.tool_calls.push(ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args.into(),
        });
        m
    }

    /// Four bytes a token, like the default estimator.
    fn quarter_bytes(req: &ChatRequest) -> u64 {
        req.messages
            .iter()
            .map(|m| m.content.len() as u64 / 4)
            .sum()
    }

    #[test]
    fn a_compaction_request_fits_its_window() {
        let profile = Profile::builtin(&crate::mol::ProfileNames::default());
        let view = vec![
            ChatMessage::user("refactor"),
            call("a", "shell", "{}"),
            ChatMessage::tool_result("a", "x".repeat(8000)),
        ];
        let roomy = fitted_compaction_request(
            &profile,
            Expert::L2,
            view.clone(),
            vec![],
            100_000,
            quarter_bytes,
        );
        assert_eq!(roomy.model, profile.adapter(Expert::L2));
        assert_eq!(roomy.max_tokens, Some(HANDOFF_MAX_TOKENS));
        assert_eq!(roomy.messages[2].content.len(), 8000);
        assert_eq!(
            roomy.messages.last().map(|m| m.content.as_str()),
            Some(HANDOFF_PROMPT)
        );

        // 2000 tokens of output in a 700-token window: the outputs are cut, and the handoff
        // gets what is left after the margin.
        let tight =
            fitted_compaction_request(&profile, Expert::L2, view, vec![], 700, quarter_bytes);
        assert!(tight.messages[2].content.len() < 8000);
        assert!(
            tight.messages[2]
                .content
                .contains("cut for this summary request")
        );
        let room = 700 - quarter_bytes(&tight) - HANDOFF_MARGIN;
        assert!(room < HANDOFF_MAX_TOKENS as u64);
        assert_eq!(tight.max_tokens, Some(room as u32));

        let tiny =
            fitted_compaction_request(&profile, Expert::L2, vec![], vec![], 10, quarter_bytes);
        assert_eq!(tiny.max_tokens, Some(HANDOFF_MIN_TOKENS as u32));
    }

    fn long_task(steps: usize) -> Timeline {
        let mut t = Timeline::new();
        t.open(Expert::L2, "refactor the parser");
        t.push(call(
            "p",
            "update_plan",
            r#"{"plan":[{"step":"read","status":"in_progress"}]}"#,
        ));
        t.push(ChatMessage::tool_result("p", "plan updated"));
        t.push(call(
            "w",
            "write_file",
            r#"{"path":"src/planted.rs","content":"x"}"#,
        ));
        t.push(ChatMessage::tool_result("w", "wrote"));
        for i in 0..steps {
            t.push(call(
                &format!("c{i}"),
                "shell",
                r#"{"command":"cargo test"}"#,
            ));
            t.push(ChatMessage::tool_result(format!("c{i}"), "y".repeat(4000)));
        }
        t
    }

    #[test]
    fn compaction_keeps_request_plan_files_and_recent_steps() {
        let mut t = long_task(10);
        let id = t.tasks[0].id;
        assert!(t.compact(id, "Did many things.", 2));
        let view = t.view(Expert::L2, &[ChatMessage::system("sys")]);
        assert_eq!(view[1].content, "refactor the parser");
        let handoff = &view[2].content;
        assert!(handoff.contains("Did many things."));
        assert!(handoff.contains("update_plan") || handoff.contains("\"plan\""));
        assert!(handoff.contains("src/planted.rs"));
        // system + request + handoff + 2 steps of (call, result)
        assert_eq!(view.len(), 3 + 4);

        // Append-only afterwards.
        let before = t.view(Expert::L2, &[]);
        t.push(call("n", "shell", "{}"));
        let after = t.view(Expert::L2, &[]);
        assert_eq!(&after[..before.len()], &before[..]);

        // A second compaction keeps the files and the plan.
        for i in 0..5 {
            t.push(ChatMessage::tool_result(format!("n{i}"), "z"));
            t.push(call(&format!("m{i}"), "shell", "{}"));
        }
        assert!(t.compact(id, "", 1));
        let c = t.tasks[0].compaction.as_ref().unwrap();
        assert_eq!(c.count, 2);
        assert_eq!(c.files_touched, vec!["src/planted.rs"]);
        assert!(c.plan.is_some());
        let view = t.view(Expert::L2, &[]);
        assert!(view[1].content.contains("summary request failed"));
    }

    #[test]
    fn old_tool_outputs_shrink_with_a_pointer() {
        let mut t = long_task(4);
        let id = t.tasks[0].id;
        assert!(t.shrink_old_tool_outputs(id, 2));
        assert!(!t.shrink_old_tool_outputs(id, 2));
        let view = t.view(Expert::L2, &[]);
        let tools: Vec<&ChatMessage> = view.iter().filter(|m| m.role == Role::Tool).collect();
        assert!(
            tools[2]
                .content
                .contains("[… output of step 3, 3 KB, truncated: ")
        );
        assert_eq!(tools[4].content.len(), 4000);
        assert_eq!(tools[5].content.len(), 4000);
    }

    #[test]
    fn own_older_tasks_fold_to_their_summaries() {
        let mut t = Timeline::new();
        t.open(Expert::L2, "first");
        t.push(ChatMessage::assistant("raw first answer"));
        let first = t.close(true).unwrap();
        t.open(Expert::L2, "second");
        t.push(ChatMessage::assistant("raw second answer"));
        t.close(true);
        let third = t.open(Expert::L2, "third");
        // No summary yet: nothing to fold.
        assert!(!t.fold_own_tasks(Expert::L2, third));
        t.record_summary(first, "Did the first thing.");
        assert!(t.fold_own_tasks(Expert::L2, third));
        assert!(!t.fold_own_tasks(Expert::L2, third));
        let view = t.view(Expert::L2, &[]);
        let texts: Vec<&str> = view.iter().map(|m| m.content.as_str()).collect();
        assert!(texts.iter().any(|t| t.contains("Did the first thing.")));
        assert!(!texts.contains(&"raw first answer"));
        // The second task has no summary yet: it stays verbatim, never dropped.
        assert!(texts.contains(&"raw second answer"));
    }

    #[test]
    fn keeping_no_recent_output_shrinks_them_all() {
        let mut t = long_task(3);
        let id = t.tasks[0].id;
        assert!(t.shrink_old_tool_outputs(id, 0));
        let view = t.view(Expert::L2, &[]);
        assert!(
            view.iter()
                .filter(|m| m.role == Role::Tool)
                .all(|m| m.content.len() < 1200)
        );
        let cut = shrink_all_outputs(t.full_history(&[]));
        assert!(
            cut.iter()
                .any(|m| m.content.contains("3 KB cut for this summary request"))
        );
        assert!(t.tasks[0].messages.iter().any(|m| m.content.len() == 4000));
    }

    #[test]
    fn shrunk_outputs_are_cut_at_line_boundaries_and_say_which_lines_are_missing() {
        let content: String = (1..=200).map(|i| format!("line {i:03}\n")).collect();
        let out = shrink_output(&content, 4);
        let (head, rest) = out.split_once("[…").unwrap();
        let (pointer, tail) = rest.split_once("…]\n").unwrap();
        assert!(head.ends_with("line 056\n"), "whole lines only: {head:?}");
        assert!(
            tail.starts_with("line 145\n") && tail.ends_with("line 200\n"),
            "{tail:?}"
        );
        assert!(pointer.contains("lines 57–144 left out"), "{pointer}");
        assert!(pointer.contains("read_file with an offset"), "{pointer}");
    }

    #[test]
    fn shrink_respects_utf8_boundaries() {
        let s = "é".repeat(2000);
        let out = shrink_output(&s, 1);
        assert!(out.contains("truncated"));
    }

    #[test]
    fn compaction_request_shape() {
        let p = Profile::builtin(&Default::default());
        let req = compaction_request(&p, Expert::L1, vec![ChatMessage::user("u")], vec![]);
        assert_eq!(req.model, "L1");
        assert_eq!(req.hop, Hop::Compaction);
        assert_eq!(req.messages.last().unwrap().content, HANDOFF_PROMPT);
        assert!(!req.stream && req.tools.is_empty() && req.tool_choice.is_none());
        assert_eq!(req.max_tokens, Some(HANDOFF_MAX_TOKENS));
        // With the answer hop's tools: the same tools, never called.
        let tools = vec![ToolSpec {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }];
        let req = compaction_request(&p, Expert::L1, vec![ChatMessage::user("u")], tools.clone());
        assert_eq!(req.tools, tools);
        assert_eq!(req.tool_choice.as_deref(), Some("none"));
    }
}
