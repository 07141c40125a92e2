//! Configuration errors, `baton doctor` and the checks `--exec` makes before it sends
//! anything, through the real binary (issue: a developer's first week).

use crate::support::env::Env;
use predicates::prelude::*;

#[test]
fn a_missing_cd_folder_names_the_flag() {
    Env::new()
        .baton()
        .args(["--cd", "/nonexistent/baton-ws", "--exec", "x"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("flag -C/--cd")
                .and(predicate::str::contains("/nonexistent/baton-ws: folder not found")),
        );
}

#[test]
fn config_errors_name_the_line_and_the_nearest_key() {
    let env = Env::new();
    let path = env.user_config("endpoint = \"http://127.0.0.1:9/v1\"\napprovals = \"ask\"\n");
    env.baton().args(["--exec", "x"]).assert().code(2).stderr(predicate::str::contains(
        format!(
            "{}:2: key `approvals`: unknown key, did you mean `approval`?",
            path.display()
        ),
    ));
    env.user_config("endpoint = \"http://127.0.0.1:9/v1\"\n[sandbox]\nnetwork = yes\n");
    env.baton()
        .args(["--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!("{}:3:11: not valid TOML", path.display())));
}
