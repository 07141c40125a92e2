//! Custom slash commands and skills end to end with `--exec` (the TUI's side is in
//! `tui_tmux`): a command's arguments fill its body; a skill's body reaches the model only
//! through the `skill` tool, never in the first prompt.

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, Script};

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn engine() -> MockEngine {
    MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .default_answer("ok")
            .default_summary("s"),
    )
}

#[test]
fn a_project_command_with_arguments_runs_headless() {
    let env = Env::new();
    let dir = env.workspace.join(".baton/commands");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("review.md"),
        "---\ndescription: Review code\nargument-hint: [path] [focus]\n---\n\
         Review the code in $1, focusing on $2.\nEverything: $ARGUMENTS\n",
    )
    .expect("write");
    let engine = engine();
    let out = env
        .exec(&engine, r#"/review src/ "error handling""#, &[])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let user = engine.requests_for_hop("answer")[0]
        .last_user_text()
        .unwrap_or_default();
    assert_eq!(
        user,
        "Review the code in src/, focusing on error handling.\nEverything: src/ \"error handling\""
    );
}

#[test]
fn a_user_command_without_placeholders_gets_its_arguments_appended_and_paths_pass() {
    let env = Env::new();
    let dir = env.home.join(".config/baton/commands");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("explain.md"), "Explain this code simply.\n").expect("write");
    let engine = engine();
    let out = env
        .exec(&engine, "/explain src/main.rs", &[])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let user = engine.requests_for_hop("answer")[0]
        .last_user_text()
        .unwrap_or_default();
    assert_eq!(user, "Explain this code simply.\n\nARGUMENTS: src/main.rs");

    // A prompt that starts with a path is not a command.
    engine.clear_requests();
    let out = env
        .exec(&engine, "/usr/bin/env fails here", &[])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let user = engine.requests_for_hop("answer")[0]
        .last_user_text()
        .unwrap_or_default();
    assert_eq!(user, "/usr/bin/env fails here");
}

#[test]
fn a_skill_body_is_read_only_when_the_expert_uses_it() {
    let env = Env::new();
    let skill = env.home.join(".config/baton/skills/pdf-forms");
    std::fs::create_dir_all(&skill).expect("mkdir");
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: pdf-forms\ndescription: Fill in PDF forms with pdftk\n---\n\
         # PDF forms\n\nSKILL-BODY-7731: run `pdftk in.pdf fill_form data.fdf output out.pdf`.\n",
    )
    .expect("write");
    let project = env.workspace.join(".agents/skills/changelog");
    std::fs::create_dir_all(&project).expect("mkdir");
    std::fs::write(
        project.join("SKILL.md"),
        "---\nname: changelog\ndescription: Write CHANGELOG entries\n---\nCHANGELOG-BODY-99\n",
    )
    .expect("write");
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("c1", "skill", r#"{"name":"pdf-forms"}"#),
            )
            .answer("L2", "filled")
            .default_summary("s"),
    );
    let out = env
        .exec(&engine, "fill the form", &[])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let answers = engine.requests_for_hop("answer");
    assert_eq!(answers.len(), 2);
    let system = answers[0].system_text().unwrap_or_default();
    assert!(
        system.contains("- pdf-forms: Fill in PDF forms with pdftk"),
        "{system}"
    );
    assert!(system.contains("- changelog: Write CHANGELOG entries"));
    assert!(answers[0].tool_names().contains(&"skill".to_string()));
    // The first prompt carries names and descriptions only.
    assert!(!answers[0].raw_body.contains("SKILL-BODY-7731"));
    assert!(!answers[0].raw_body.contains("CHANGELOG-BODY-99"));
    let tool: Vec<String> = answers[1]
        .transcript()
        .into_iter()
        .filter(|(r, _)| r == "tool")
        .map(|(_, t)| t)
        .collect();
    assert!(tool[0].contains("SKILL-BODY-7731"), "{tool:?}");
    assert!(!answers[1].raw_body.contains("CHANGELOG-BODY-99"));
}

#[test]
fn without_skills_there_is_no_skill_tool_or_listing() {
    let env = Env::new();
    let engine = engine();
    let out = env.exec(&engine, "hi", &[]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let answer = &engine.requests_for_hop("answer")[0];
    assert!(!answer.tool_names().contains(&"skill".to_string()));
    assert!(
        !answer
            .system_text()
            .unwrap_or_default()
            .contains("# Skills")
    );
}
