//! File, search, outline and plan tools against real files in temp dirs: path refusals,
//! stale-edit detection, all-or-nothing patches, byte-exact CRLF / non-UTF-8 preservation,
//! edit error messages, grep's .gitignore and binary handling, outlines for every language.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton::protocol::{Event, EventSink, PlanStatus, ToolStatus};
use baton::tool::registry::standard_tools;
use baton::tool::{ApprovalNeed, ToolContext, ToolResult, ToolState};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

struct Workspace {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ctx: ToolContext,
    events: UnboundedReceiver<Event>,
}

fn workspace() -> Workspace {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (events, rx) = EventSink::channel();
    let ctx = ToolContext {
        workspace: root.clone(),
        call_id: "call-1".into(),
        events,
        cancel: Default::default(),
        state: Arc::new(ToolState::default()),
    };
    Workspace {
        _dir: dir,
        root,
        ctx,
        events: rx,
    }
}

impl Workspace {
    fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.root.join(rel)).unwrap()
    }

    async fn call(&self, tool: &str, args: Value) -> ToolResult {
        let registry = standard_tools();
        registry.get(tool).unwrap().run(args, &self.ctx).await
    }

    fn approval(&self, tool: &str, args: Value) -> ApprovalNeed {
        standard_tools()
            .get(tool)
            .unwrap()
            .approval(&args, &self.ctx)
    }

    fn drain(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            out.push(e);
        }
        out
    }
}

fn ok(result: &ToolResult) -> &str {
    assert_eq!(result.status, ToolStatus::Ok, "{}", result.content);
    &result.content
}

fn err(result: &ToolResult) -> &str {
    assert_eq!(result.status, ToolStatus::Error, "{}", result.content);
    &result.content
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused_by_every_file_tool() {
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.root.join("out")).unwrap();
    std::os::unix::fs::symlink(&secret, ws.root.join("link.txt")).unwrap();
    let attempts = [
        secret.display().to_string(),
        "../secret.txt".to_string(),
        "out/secret.txt".to_string(),
        "link.txt".to_string(),
        "/proc/self/cwd/secret.txt".to_string(),
        "/etc/passwd".to_string(),
    ];
    for path in &attempts {
        let read = ws.call("read_file", json!({"path": path})).await;
        assert!(
            err(&read).contains(path.as_str()),
            "{path}: {}",
            read.content
        );
        let write = ws
            .call("write_file", json!({"path": path, "content": "pwned\n"}))
            .await;
        assert!(
            err(&write).contains(path.as_str()),
            "{path}: {}",
            write.content
        );
        let edit = ws
            .call(
                "edit",
                json!({"path": path, "old_string": "secret", "new_string": "pwned"}),
            )
            .await;
        assert!(
            err(&edit).contains(path.as_str()),
            "{path}: {}",
            edit.content
        );
        let patch =
            format!("*** Begin Patch\n*** Update File: {path}\n-secret\n+pwned\n*** End Patch\n");
        let patched = ws.call("apply_patch", json!({"input": patch})).await;
        assert!(
            err(&patched).contains(path.as_str()),
            "{path}: {}",
            patched.content
        );
    }
    let added = ws
        .call(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Add File: out/new.txt\n+x\n*** End Patch"}),
        )
        .await;
    err(&added);
    assert!(!outside.path().join("new.txt").exists());
    let hooks = ws
        .call(
            "write_file",
            json!({"path": ".git/hooks/pre-commit", "content": "x"}),
        )
        .await;
    assert!(err(&hooks).contains(".git"));
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret\n");
}

#[tokio::test]
async fn stale_and_unread_edits_are_refused_new_files_allowed() {
    let ws = workspace();
    ws.write("a.txt", "alpha\nbeta\n");
    let unread = ws
        .call(
            "edit",
            json!({"path": "a.txt", "old_string": "beta", "new_string": "BETA"}),
        )
        .await;
    assert!(
        err(&unread).contains("has not been read"),
        "{}",
        unread.content
    );
    let overwrite = ws
        .call("write_file", json!({"path": "a.txt", "content": "x"}))
        .await;
    err(&overwrite);

    ok(&ws.call("read_file", json!({"path": "a.txt"})).await);
    ws.write("a.txt", "alpha\nbeta\ngamma changed on disk\n");
    let stale = ws
        .call(
            "edit",
            json!({"path": "a.txt", "old_string": "beta", "new_string": "BETA"}),
        )
        .await;
    assert!(err(&stale).contains("file changed since read; read it again"));
    let stale_patch = ws
        .call(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: a.txt\n-beta\n+BETA\n*** End Patch"}),
        )
        .await;
    assert!(err(&stale_patch).contains("file changed since read"));

    ok(&ws.call("read_file", json!({"path": "a.txt"})).await);
    ok(&ws
        .call(
            "edit",
            json!({"path": "a.txt", "old_string": "beta", "new_string": "BETA"}),
        )
        .await);
    // Our own write refreshes the stamp: a second edit needs no re-read.
    ok(&ws
        .call(
            "edit",
            json!({"path": "a.txt", "old_string": "alpha", "new_string": "ALPHA"}),
        )
        .await);
    assert_eq!(ws.read("a.txt"), b"ALPHA\nBETA\ngamma changed on disk\n");

    let created = ws
        .call(
            "write_file",
            json!({"path": "deep/new/dir/file.txt", "content": "hi\n"}),
        )
        .await;
    assert!(ok(&created).contains("Created deep/new/dir/file.txt"));
    assert_eq!(ws.read("deep/new/dir/file.txt"), b"hi\n");
}

#[tokio::test]
async fn writes_are_atomic_keep_permissions_and_emit_diffs() {
    use std::os::unix::fs::PermissionsExt;
    let mut ws = workspace();
    ws.write("run.sh", "#!/bin/sh\necho one\n");
    let path = ws.root.join("run.sh");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o751)).unwrap();
    ok(&ws.call("read_file", json!({"path": "run.sh"})).await);
    let need = ws.approval(
        "edit",
        json!({"path": "run.sh", "old_string": "one", "new_string": "two"}),
    );
    let ApprovalNeed::Edit { path: shown, diff } = need else {
        panic!("edit must need edit approval")
    };
    assert_eq!(shown, "run.sh");
    assert!(diff.contains("-echo one\n+echo two"), "{diff}");
    assert_eq!(
        ws.approval("read_file", json!({"path": "run.sh"})),
        ApprovalNeed::None
    );
    ok(&ws
        .call(
            "edit",
            json!({"path": "run.sh", "old_string": "one", "new_string": "two"}),
        )
        .await);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o751);
    let leftovers: Vec<_> = std::fs::read_dir(&ws.root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".baton-write"))
        .collect();
    assert!(leftovers.is_empty());
    let diffs: Vec<_> = ws
        .drain()
        .into_iter()
        .filter_map(|e| match e {
            Event::FileDiff { path, diff, .. } => Some((path, diff)),
            _ => None,
        })
        .collect();
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].0, "run.sh");
    assert!(diffs[0].1.contains("+echo two"));
}

#[tokio::test]
async fn a_patch_with_one_bad_hunk_changes_nothing() {
    let ws = workspace();
    ws.write("a.txt", "one\ntwo\nthree\n");
    ws.write("b.txt", "four\nfive\nsix\n");
    ws.write("gone.txt", "still here\n");
    let patch = "*** Begin Patch\n\
                 *** Update File: a.txt\n one\n-two\n+TWO\n three\n\
                 *** Delete File: gone.txt\n\
                 *** Add File: c.txt\n+new file\n\
                 *** Update File: b.txt\n four\n-not in the file\n+x\n\
                 *** End Patch\n";
    let result = ws.call("apply_patch", json!({"input": patch})).await;
    let message = err(&result);
    assert!(
        message.contains("b.txt") && message.contains("hunk 1"),
        "{message}"
    );
    assert_eq!(ws.read("a.txt"), b"one\ntwo\nthree\n");
    assert_eq!(ws.read("gone.txt"), b"still here\n");
    assert!(!ws.root.join("c.txt").exists());
}

#[tokio::test]
async fn a_patch_adds_updates_moves_and_deletes() {
    let mut ws = workspace();
    ws.write(
        "src/old.py",
        "def f():\n    return 1\n\n\ndef g():\n    return 1\n",
    );
    ws.write("gone.txt", "bye\n");
    let patch = "*** Begin Patch\n\
                 *** Update File: src/old.py\n\
                 *** Move to: src/new.py\n\
                 @@ def g():\n-    return 1\n+    return 2\n\
                 *** Delete File: gone.txt\n\
                 *** Add File: docs/readme.md\n+# Title\n+text\n\
                 *** End Patch";
    let ApprovalNeed::Edit { path, diff } = ws.approval("apply_patch", json!({"input": patch}))
    else {
        panic!("a patch must need edit approval")
    };
    assert_eq!(path, "src/new.py, gone.txt, docs/readme.md");
    assert!(
        diff.contains("--- a/src/old.py\n+++ b/src/new.py"),
        "{diff}"
    );
    assert!(
        diff.contains("+    return 2") && diff.contains("+++ /dev/null"),
        "{diff}"
    );
    assert!(
        ws.root.join("src/old.py").exists(),
        "approval must not write"
    );
    let result = ws.call("apply_patch", json!({"input": patch})).await;
    let summary = ok(&result);
    assert!(summary.contains("R src/old.py -> src/new.py"), "{summary}");
    assert!(summary.contains("D gone.txt") && summary.contains("A docs/readme.md"));
    assert_eq!(
        ws.read("src/new.py"),
        b"def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    );
    assert!(!ws.root.join("src/old.py").exists() && !ws.root.join("gone.txt").exists());
    assert_eq!(ws.read("docs/readme.md"), b"# Title\ntext\n");
    let diffs = ws
        .drain()
        .into_iter()
        .filter(|e| matches!(e, Event::FileDiff { .. }))
        .count();
    assert_eq!(diffs, 3);
}

#[tokio::test]
async fn crlf_and_non_utf8_files_are_preserved_byte_for_byte() {
    let ws = workspace();
    let crlf = b"first line\r\nsecond line\r\nthird line\r\n".to_vec();
    let latin1 = b"caf\xe9 cr\xe8me\nna\xefve line\n".to_vec();
    ws.write("crlf.txt", &crlf);
    ws.write("latin1.txt", &latin1);
    ws.write("other.txt", "x\n");
    // Changing another file leaves both untouched.
    ok(&ws.call("read_file", json!({"path": "other.txt"})).await);
    ok(&ws
        .call(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: other.txt\n-x\n+y\n*** End Patch"}),
        )
        .await);
    assert_eq!(ws.read("crlf.txt"), crlf);
    assert_eq!(ws.read("latin1.txt"), latin1);

    // An edit spanning lines written with \n matches the CRLF text and keeps CRLF.
    let read = ws.call("read_file", json!({"path": "crlf.txt"})).await;
    assert!(
        ok(&read).contains("     2\tsecond line\n"),
        "{}",
        read.content
    );
    ok(&ws
        .call(
            "edit",
            json!({"path": "crlf.txt", "old_string": "first line\nsecond", "new_string": "1st line\nadded\nsecond"}),
        )
        .await);
    assert_eq!(
        ws.read("crlf.txt"),
        b"1st line\r\nadded\r\nsecond line\r\nthird line\r\n"
    );
    // A patch on a CRLF file keeps CRLF too.
    ok(&ws
        .call(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: crlf.txt\n third line\n+fourth line\n*** End Patch"}),
        )
        .await);
    assert_eq!(
        ws.read("crlf.txt"),
        b"1st line\r\nadded\r\nsecond line\r\nthird line\r\nfourth line\r\n"
    );

    // Editing ASCII text in a Latin-1 file keeps every other byte.
    let read = ws.call("read_file", json!({"path": "latin1.txt"})).await;
    assert!(ok(&read).contains("not valid UTF-8"), "{}", read.content);
    ok(&ws
        .call(
            "edit",
            json!({"path": "latin1.txt", "old_string": "line", "new_string": "LINE"}),
        )
        .await);
    assert_eq!(ws.read("latin1.txt"), b"caf\xe9 cr\xe8me\nna\xefve LINE\n");
}

#[tokio::test]
async fn edit_errors_show_competing_and_nearest_matches() {
    let ws = workspace();
    ws.write(
        "m.py",
        "import os\n\ndef a():\n    x = 1\n    return x\n\ndef b():\n    x = 1\n    return x\n",
    );
    ok(&ws.call("read_file", json!({"path": "m.py"})).await);
    let ambiguous = ws
        .call(
            "edit",
            json!({"path": "m.py", "old_string": "x = 1", "new_string": "x = 2"}),
        )
        .await;
    let message = err(&ambiguous);
    assert!(message.contains("occurs 2 times"), "{message}");
    assert!(message.contains("     4\t    x = 1") && message.contains("     8\t    x = 1"));
    assert!(message.contains("replace_all"));

    let missing = ws
        .call(
            "edit",
            json!({"path": "m.py", "old_string": "def c():\n    x = 1", "new_string": ""}),
        )
        .await;
    let message = err(&missing);
    assert!(message.contains("not found"), "{message}");
    assert!(message.contains("Nearest lines"), "{message}");
    assert!(message.contains(">    3\tdef a():") || message.contains(">    7\tdef b():"));

    let indent = ws
        .call(
            "edit",
            json!({"path": "m.py", "old_string": "def a():\n  x = 1", "new_string": "z"}),
        )
        .await;
    assert!(
        err(&indent).contains("different whitespace"),
        "{}",
        indent.content
    );

    let all = ws
        .call(
            "edit",
            json!({"path": "m.py", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true}),
        )
        .await;
    assert!(ok(&all).contains("2 replacements"));
    assert_eq!(
        String::from_utf8(ws.read("m.py"))
            .unwrap()
            .matches("x = 2")
            .count(),
        2
    );
}

#[tokio::test]
async fn read_file_ranges_binary_and_size_cap() {
    let ws = workspace();
    let padding = "x".repeat(50);
    let text: String = (1..=5000)
        .map(|i| format!("line number {i} {padding}\n"))
        .collect();
    ws.write("long.txt", &text);
    let first = ws.call("read_file", json!({"path": "long.txt"})).await;
    let content = ok(&first);
    assert!(
        content.starts_with("long.txt (lines 1-"),
        "{}",
        &content[..80]
    );
    assert!(content.contains("     1\tline number 1 xxx"));
    assert!(
        content.contains("Continue with offset="),
        "{}",
        &content[content.len() - 300..]
    );
    let range = ws
        .call(
            "read_file",
            json!({"path": "long.txt", "offset": 4990, "limit": 5}),
        )
        .await;
    let content = ok(&range);
    assert!(content.contains("(lines 4990-4994 of 5000)"), "{content}");
    assert!(content.contains("  4994\tline number 4994 xxx"));
    assert!(content.contains("continue with offset=4995"));
    let past = ws
        .call("read_file", json!({"path": "long.txt", "offset": 9000}))
        .await;
    assert!(err(&past).contains("5000 lines"));

    ws.write("blob.bin", [0x7fu8, b'E', b'L', b'F', 0, 0, 1, 2, 3]);
    let binary = ws.call("read_file", json!({"path": "blob.bin"})).await;
    assert!(err(&binary).contains("binary file"));
    assert!(!binary.content.contains("ELF"));
    let dir = ws.call("read_file", json!({"path": "."})).await;
    assert!(err(&dir).contains("directory"));
}

#[tokio::test]
async fn grep_respects_gitignore_skips_binaries_and_caps() {
    let ws = workspace();
    ws.write(".gitignore", "target/\n*.log\n");
    ws.write("src/main.rs", "fn main() {\n    needle();\n}\n");
    ws.write("src/lib.rs", "pub fn needle() {}\n");
    ws.write("target/debug/out.rs", "needle in ignored dir\n");
    ws.write("build.log", "needle in ignored file\n");
    ws.write("data.bin", b"needle\0\x01\x02binary");
    let result = ws.call("grep", json!({"pattern": "needle"})).await;
    let text = ok(&result);
    assert!(text.contains("src/lib.rs:1:pub fn needle() {}"), "{text}");
    assert!(text.contains("src/main.rs:2:    needle();"), "{text}");
    assert!(!text.contains("target/") && !text.contains("build.log") && !text.contains("data.bin"));

    for i in 0..30 {
        ws.write(&format!("many/f{i:02}.txt"), "hit\nhit\n");
    }
    let capped = ws
        .call(
            "grep",
            json!({"pattern": "^hit$", "path": "many", "max_results": 10}),
        )
        .await;
    let text = ok(&capped);
    assert_eq!(text.lines().filter(|l| l.starts_with("many/")).count(), 10);
    assert!(
        text.contains("[50 more matching lines not shown (60 lines in 30 files"),
        "{text}"
    );
    let files = ws
        .call(
            "grep",
            json!({"pattern": "needle", "files_only": true, "glob": "*.rs"}),
        )
        .await;
    assert_eq!(ok(&files), "src/lib.rs\nsrc/main.rs\n");
    let bad = ws.call("grep", json!({"pattern": "("})).await;
    assert!(err(&bad).contains("invalid regex"));
}

/// `context` shows the lines around each match the way ripgrep does: `path-N-` for context,
/// overlapping groups merged, `--` between groups that skip lines and between files.
#[tokio::test]
async fn grep_context_shows_the_lines_around_each_match() {
    let ws = workspace();
    let lines: Vec<String> = (1..=12).map(|i| format!("line {i}")).collect();
    let mut text = lines.join("\n") + "\n";
    text = text
        .replace("line 3\n", "line 3 HIT\n")
        .replace("line 5\n", "line 5 HIT\n");
    text = text.replace("line 11\n", "line 11 HIT\n");
    ws.write("a.txt", text.as_bytes());
    ws.write("b.txt", "HIT first\r\nafter\n");
    let result = ws
        .call("grep", json!({"pattern": "HIT", "context": 1}))
        .await;
    assert_eq!(
        ok(&result),
        "a.txt-2-line 2\na.txt:3:line 3 HIT\na.txt-4-line 4\na.txt:5:line 5 HIT\n\
         a.txt-6-line 6\n--\na.txt-10-line 10\na.txt:11:line 11 HIT\na.txt-12-line 12\n\
         --\nb.txt:1:HIT first\nb.txt-2-after\n"
    );
    // The cap counts matches; the context of a match left out is left out with it.
    let capped = ws
        .call(
            "grep",
            json!({"pattern": "HIT", "path": "a.txt", "context": 1, "max_results": 1}),
        )
        .await;
    let text = ok(&capped);
    assert!(
        text.starts_with("a.txt-2-line 2\na.txt:3:line 3 HIT\na.txt-4-line 4\n["),
        "{text}"
    );
    let too_wide = ws
        .call(
            "grep",
            json!({"pattern": "HIT", "path": "b.txt", "context": 1000}),
        )
        .await;
    assert_eq!(ok(&too_wide), "b.txt:1:HIT first\nb.txt-2-after\n");
}

#[tokio::test]
async fn list_dir_and_glob_respect_gitignore() {
    let ws = workspace();
    ws.write(".gitignore", "node_modules/\n");
    ws.write("src/a.rs", "");
    ws.write("src/deep/b.rs", "");
    ws.write("node_modules/x/index.js", "");
    ws.write("README.md", "");
    let listing = ws.call("list_dir", json!({"path": ".", "depth": 3})).await;
    let text = ok(&listing);
    assert!(
        text.contains("  src/\n    a.rs\n    deep/\n      b.rs\n"),
        "{text}"
    );
    assert!(!text.contains("node_modules"));
    let globbed = ws.call("glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(ok(&globbed), "src/a.rs\nsrc/deep/b.rs\n");
    let by_name = ws.call("glob", json!({"pattern": "*.md"})).await;
    assert_eq!(ok(&by_name), "README.md\n");
}

const SOURCES: &[(&str, &str, &[&str])] = &[
    (
        "lib.rs",
        "pub struct Point { x: i32 }\n\nimpl Point {\n    pub fn new() -> Self {\n        Point { x: 0 }\n    }\n}\n\ntrait Shape {\n    fn area(&self) -> f64;\n}\n\nenum Kind { A }\n\nfn helper() {}\n",
        &[
            "struct Point (L1)",
            "impl Point (L3-7)",
            "  method new (L4-6)",
            "trait Shape (L9-11)",
            "  method area (L10)",
            "enum Kind (L13)",
            "fn helper (L15)",
        ],
    ),
    (
        "app.py",
        "class Greeter:\n    def hello(self):\n        return 1\n\n\ndef main():\n    pass\n",
        &[
            "class Greeter (L1-3)",
            "  method hello (L2-3)",
            "def main (L6-7)",
        ],
    ),
    (
        "app.js",
        "function start() {}\nclass Server {\n  listen() {}\n}\nconst stop = () => {};\n",
        &[
            "function start (L1)",
            "class Server (L2-4)",
            "  method listen (L3)",
            "function stop (L5)",
        ],
    ),
    (
        "app.ts",
        "interface User { name: string }\ntype Id = number;\nexport class Repo {\n  find(id: Id): User | null { return null; }\n}\nenum Color { Red }\n",
        &[
            "interface User (L1)",
            "type Id (L2)",
            "class Repo (L3-5)",
            "  method find (L4)",
            "enum Color (L6)",
        ],
    ),
    (
        "view.tsx",
        "export function View(): JSX.Element {\n  return <div>hi</div>;\n}\n",
        &["function View (L1-3)"],
    ),
    (
        "main.go",
        "package main\n\ntype Server struct{}\n\ntype Handler interface{}\n\nfunc (s *Server) Run() {}\n\nfunc main() {}\n",
        &[
            "struct Server (L3)",
            "interface Handler (L5)",
            "method (s *Server) Run (L7)",
            "func main (L9)",
        ],
    ),
    (
        "util.c",
        "struct node { int v; };\n\ntypedef int score;\n\nstatic int *find(int k) {\n    return 0;\n}\n",
        &[
            "struct node (L1)",
            "typedef score (L3)",
            "function find (L5-7)",
        ],
    ),
    (
        "shape.cpp",
        "namespace geo {\nclass Circle {\npublic:\n    double area() const { return 0; }\n};\n}\nint Circle::radius() { return 1; }\n",
        &[
            "namespace geo (L1-6)",
            "  class Circle (L2-5)",
            "    method area (L4)",
            "method Circle::radius (L7)",
        ],
    ),
];

#[tokio::test]
async fn outline_lists_definitions_for_every_language() {
    let ws = workspace();
    for (name, source, _) in SOURCES {
        ws.write(name, source);
    }
    for (name, _, expected) in SOURCES {
        let result = ws.call("outline", json!({"path": name})).await;
        let text = ok(&result);
        for line in *expected {
            assert!(
                text.contains(&format!("  {line}\n")),
                "{name}: missing '{line}' in\n{text}"
            );
        }
    }
    let all = ws.call("outline", json!({"path": "."})).await;
    assert!(ok(&all).contains("main.go (go"));
    let unsupported = ws.call("outline", json!({"path": "notes.txt"})).await;
    err(&unsupported);
}

#[tokio::test]
async fn update_plan_keeps_the_plan_and_emits_an_event() {
    let mut ws = workspace();
    let result = ws
        .call(
            "update_plan",
            json!({"plan": [
                {"step": "read the code", "status": "completed"},
                {"step": "fix the bug", "status": "in_progress"},
                {"step": "run tests", "status": "pending"}
            ]}),
        )
        .await;
    assert!(ok(&result).contains("1/3 completed"));
    assert_eq!(ws.ctx.state.plan.lock().unwrap().len(), 3);
    let events = ws.drain();
    let Some(Event::PlanUpdated { items }) = events.last() else {
        panic!("no PlanUpdated: {events:?}")
    };
    assert_eq!(items[1].status, PlanStatus::InProgress);
    let two_active = ws
        .call(
            "update_plan",
            json!({"plan": [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]}),
        )
        .await;
    err(&two_active);
}

#[test]
fn paths_resolve_inside_only() {
    let ws = workspace();
    let resolved = baton::tool::path::resolve(&ws.root, "a/b.txt").unwrap();
    assert_eq!(resolved.abs, ws.root.join("a/b.txt"));
    assert!(baton::tool::path::resolve(&ws.root, "a/../../b").is_err());
    assert!(baton::tool::path::resolve(Path::new(&ws.root), "").is_err());
}
