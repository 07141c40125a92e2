//! Custom slash commands and skills: Markdown files the user (or a project) keeps next to the
//! configuration. Commands are `commands/NAME.md` (Claude Code's format: optional front matter
//! `description` and `argument-hint`, a body with `$ARGUMENTS`, `$1`…); skills are folders
//! holding a `SKILL.md` (front matter `name`, `description`), whose body the experts read only
//! when one applies. Both are text for the model and run nothing themselves, so a project's
//! are read without the trust a project's hooks need.

use std::path::{Path, PathBuf};

/// Largest command or skill file read; a bigger one is skipped with a note.
const MAX_FILE: u64 = 256 * 1024;

/// `key: value` lines between `---` fences at the top of a file, and the rest. A file without
/// front matter is all body. Values may be quoted; other YAML is not interpreted.
pub fn front_matter(text: &str) -> (Vec<(String, String)>, &str) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (Vec::new(), text);
    };
    let mut fields = Vec::new();
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        offset += line.len();
        let trimmed = line.trim();
        if trimmed == "---" {
            return (fields, &rest[offset..]);
        }
        if let Some((key, value)) = trimmed.split_once(':') {
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(value);
            fields.push((key.trim().to_string(), value.to_string()));
        }
    }
    // No closing fence: not front matter after all.
    (Vec::new(), text)
}

fn field<'a>(fields: &'a [(String, String)], key: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// A command or skill file of a project, read as the trust digests read project files
/// (links followed, never a FIFO or device: a command could leave one where a `.md` was).
fn read_small(path: &Path, notes: &mut Vec<String>) -> Option<String> {
    match crate::untrusted_fs::read_following(path, MAX_FILE) {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            notes.push(format!(
                "{}: larger than {} KiB, skipped",
                path.display(),
                MAX_FILE / 1024
            ));
            None
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            notes.push(format!("{}: cannot read: {e}", path.display()));
            None
        }
    }
}

/// Whether `path`, links resolved, stays inside `root`: a project's command or skill that is a
/// link to a file elsewhere (`SKILL.md -> ~/.ssh/…`) is not read, or the model could be handed
/// a file of the user's through a repository it cloned.
fn stays_inside(path: &Path, root: &Path) -> bool {
    match (path.canonicalize(), root.canonicalize()) {
        (Ok(p), Ok(r)) => p.starts_with(r),
        _ => false,
    }
}

/// A name a command or skill may have: what the slash parser and the skill tool accept.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The config folder of the user's commands and skills: `$XDG_CONFIG_HOME/baton`.
fn user_dir() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("baton"))
}

/// One custom slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomCommand {
    /// What follows the slash: the file name without `.md`.
    pub name: String,
    pub description: String,
    /// What the arguments are (`[file] [focus]`), shown after the name.
    pub argument_hint: Option<String>,
    pub body: String,
    pub path: PathBuf,
}

impl CustomCommand {
    /// The prompt this command sends with `args` (what followed its name): `$ARGUMENTS` is all
    /// of it, `$1`…`$9` its words (quotes group words, as in a shell). A body that uses none
    /// gets the arguments appended, so they are never lost.
    pub fn expand(&self, args: &str) -> String {
        let args = args.trim();
        let words = shlex::split(args)
            .unwrap_or_else(|| args.split_whitespace().map(str::to_string).collect());
        let mut out = String::with_capacity(self.body.len() + args.len());
        let mut used = false;
        let mut rest = self.body.as_str();
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if let Some(tail) = after.strip_prefix("ARGUMENTS") {
                out.push_str(args);
                used = true;
                rest = tail;
            } else if let Some(d) = after.chars().next().filter(|c| ('1'..='9').contains(c)) {
                let n = d as usize - '0' as usize;
                out.push_str(words.get(n - 1).map(String::as_str).unwrap_or(""));
                used = true;
                rest = &after[1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        let mut out = out.trim().to_string();
        if !used && !args.is_empty() {
            out.push_str(&format!("\n\nARGUMENTS: {args}"));
        }
        out
    }

    /// `/name [hint]`, as the popup and `/help` show it.
    pub fn usage(&self) -> String {
        match &self.argument_hint {
            Some(h) => format!("/{} {h}", self.name),
            None => format!("/{}", self.name),
        }
    }
}

/// The custom commands for `workspace`, sorted by name: `.baton/commands/*.md` of the
/// workspace over `commands/*.md` of the user's config folder (a project command of the same
/// name wins), and notes on files skipped.
pub fn discover_commands(workspace: &Path) -> (Vec<CustomCommand>, Vec<String>) {
    let dirs = [
        (user_dir().map(|d| d.join("commands")), false),
        (Some(workspace.join(".baton").join("commands")), true),
    ];
    let mut notes = Vec::new();
    let mut found: Vec<CustomCommand> = Vec::new();
    for (dir, project) in dirs {
        let Some(dir) = dir else { continue };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md") && p.is_file())
            .collect();
        paths.sort();
        for path in paths {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !valid_name(&name) {
                notes.push(format!(
                    "{}: a command name may hold only letters, digits, - and _; skipped",
                    path.display()
                ));
                continue;
            }
            if project && !stays_inside(&path, workspace) {
                notes.push(format!(
                    "{}: links outside the workspace; skipped",
                    path.display()
                ));
                continue;
            }
            let Some(text) = read_small(&path, &mut notes) else {
                continue;
            };
            let (fields, body) = front_matter(&text);
            let command = CustomCommand {
                description: field(&fields, "description")
                    .map(str::to_string)
                    .unwrap_or_else(|| first_line(body)),
                argument_hint: field(&fields, "argument-hint").map(str::to_string),
                body: body.to_string(),
                name,
                path,
            };
            found.retain(|c| c.name != command.name);
            found.push(command);
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    (found, notes)
}

fn first_line(body: &str) -> String {
    let line = body
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("custom command");
    let mut s: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        s.push('…');
    }
    s
}

/// `/name args` where `name` is one of `commands`: the prompt it expands to. `None` for any
/// other text, a path (`/usr/bin/env …`) or an unknown name included.
pub fn expand_command(text: &str, commands: &[CustomCommand]) -> Option<String> {
    let rest = text.trim_start().strip_prefix('/')?;
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let command = commands.iter().find(|c| c.name == name)?;
    Some(command.expand(args))
}

/// One skill: a folder with a `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The `SKILL.md` file; its body is read only when the skill is used.
    pub path: PathBuf,
}

impl Skill {
    /// The instructions of the skill: `SKILL.md` without its front matter.
    /// The file is read again when the model asks for it, and it may have changed since
    /// start-up: a FIFO would block the turn, a huge file exhaust memory. (A project's skill
    /// is read beneath the workspace by the skill tool instead.)
    pub fn body(&self) -> std::io::Result<String> {
        let bytes = super::trust::read_regular(&self.path, MAX_FILE)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))?;
        Ok(Skill::body_of(&String::from_utf8_lossy(&bytes)))
    }

    /// The instructions in the text of a `SKILL.md`: without its front matter.
    pub fn body_of(text: &str) -> String {
        front_matter(text).1.trim().to_string()
    }
}

/// The skills for `workspace`, sorted by name: from `skills/` of the user's config folder,
/// then `.agents/skills/` and `.baton/skills/` of the workspace (`.baton/skills/` wins over
/// `.agents/skills/` on a name they share), and notes on folders skipped. A project's skill
/// never replaces one of the user's own: sandboxed commands may write `.agents/skills/`, and
/// a skill planted there under the name of one the user relies on would speak for it in
/// every later session. Only the front matter is read here.
pub fn discover_skills(workspace: &Path) -> (Vec<Skill>, Vec<String>) {
    skills_of(user_dir().map(|d| d.join("skills")), workspace)
}

fn skills_of(user_skills: Option<PathBuf>, workspace: &Path) -> (Vec<Skill>, Vec<String>) {
    let roots = [
        (user_skills, false),
        (Some(workspace.join(".agents").join("skills")), true),
        (Some(workspace.join(".baton").join("skills")), true),
    ];
    let mut notes = Vec::new();
    let mut found: Vec<Skill> = Vec::new();
    let mut users: Vec<String> = Vec::new();
    for (root, project) in roots {
        let Some(root) = root else { continue };
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for dir in dirs {
            let path = dir.join("SKILL.md");
            if !path.is_file() {
                continue;
            }
            if project && !stays_inside(&path, workspace) {
                notes.push(format!(
                    "{}: links outside the workspace; skipped",
                    path.display()
                ));
                continue;
            }
            let Some(text) = read_small(&path, &mut notes) else {
                continue;
            };
            let (fields, _) = front_matter(&text);
            let folder = dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = field(&fields, "name").unwrap_or(&folder).to_string();
            let Some(description) = field(&fields, "description") else {
                notes.push(format!(
                    "{}: no `description` in its front matter; skipped",
                    path.display()
                ));
                continue;
            };
            if !valid_name(&name) {
                notes.push(format!(
                    "{}: a skill name may hold only letters, digits, - and _; skipped",
                    path.display()
                ));
                continue;
            }
            if project && users.contains(&name) {
                notes.push(format!(
                    "{}: a skill of yours is named {name:?}; the project's is skipped",
                    path.display()
                ));
                continue;
            }
            if !project {
                users.push(name.clone());
            }
            // One line each in every expert's context: a long description is cut.
            let description: String = description.chars().take(300).collect();
            found.retain(|s| s.name != name);
            found.push(Skill {
                name,
                description,
                path,
            });
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    (found, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(body: &str) -> CustomCommand {
        CustomCommand {
            name: "review".into(),
            description: "d".into(),
            argument_hint: None,
            body: body.into(),
            path: PathBuf::from("review.md"),
        }
    }

    #[test]
    fn arguments_fill_placeholders_or_are_appended() {
        let c = command("Review $1 for $2.\nAll: $ARGUMENTS. Cost: $5 and $x");
        assert_eq!(
            c.expand(r#"src/ "error handling""#),
            "Review src/ for error handling.\nAll: src/ \"error handling\". Cost:  and $x"
        );
        assert_eq!(
            command("Review the diff.").expand("src/"),
            "Review the diff.\n\nARGUMENTS: src/"
        );
        assert_eq!(command("Review the diff.").expand(""), "Review the diff.");
        // An unbalanced quote still splits on whitespace.
        assert_eq!(command("[$1]").expand("it's"), "[it's]");
    }

    #[test]
    fn front_matter_is_read_and_a_file_without_it_is_all_body() {
        let (f, body) = front_matter(
            "---\ndescription: \"Review code\"\nargument-hint: [path]\n---\nBody $1\n",
        );
        assert_eq!(field(&f, "description"), Some("Review code"));
        assert_eq!(field(&f, "argument-hint"), Some("[path]"));
        assert_eq!(body, "Body $1\n");
        let (f, body) = front_matter("---\nno closing fence");
        assert!(f.is_empty());
        assert_eq!(body, "---\nno closing fence");
    }

    #[test]
    fn only_known_names_expand() {
        let cmds = vec![command("Look at $ARGUMENTS")];
        assert_eq!(
            expand_command("/review src/", &cmds).as_deref(),
            Some("Look at src/")
        );
        assert_eq!(expand_command("/usr/bin/env is odd", &cmds), None);
        assert_eq!(expand_command("/other x", &cmds), None);
        assert_eq!(expand_command("review", &cmds), None);
    }

    #[test]
    fn project_commands_and_skills_are_found_and_bad_ones_noted() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join(".baton/commands")).unwrap();
        std::fs::write(
            ws.join(".baton/commands/fix.md"),
            "---\ndescription: Fix it\n---\nFix $ARGUMENTS",
        )
        .unwrap();
        std::fs::write(ws.join(".baton/commands/bad name.md"), "x").unwrap();
        std::fs::write(ws.join(".baton/commands/notes.txt"), "x").unwrap();
        let (cmds, notes) = discover_commands(ws);
        let mine: Vec<&CustomCommand> = cmds.iter().filter(|c| c.path.starts_with(ws)).collect();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].description, "Fix it");
        assert!(notes.iter().any(|n| n.contains("bad name.md")));

        for (root, name, desc) in [
            (".agents/skills/pdf", "pdf", "description: Fill PDF forms"),
            (".baton/skills/nodesc", "nodesc", "name: nodesc"),
        ] {
            std::fs::create_dir_all(ws.join(root)).unwrap();
            std::fs::write(
                ws.join(root).join("SKILL.md"),
                format!("---\nname: {name}\n{desc}\n---\nSECRET BODY"),
            )
            .unwrap();
        }
        // A skill that links to a file outside the workspace is not read.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(
            outside.path().join("secret"),
            "---\nname: leak\ndescription: d\n---\nPRIVATE",
        )
        .unwrap();
        std::fs::create_dir_all(ws.join(".baton/skills/leak")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret"),
            ws.join(".baton/skills/leak/SKILL.md"),
        )
        .unwrap();
        let (skills, notes) = discover_skills(ws);
        let mine: Vec<&Skill> = skills.iter().filter(|s| s.path.starts_with(ws)).collect();
        assert_eq!(mine.len(), 1);
        assert!(
            notes.iter().any(|n| n.contains("links outside")),
            "{notes:?}"
        );
        assert_eq!(mine[0].name, "pdf");
        assert_eq!(mine[0].body().unwrap(), "SECRET BODY");
        assert!(notes.iter().any(|n| n.contains("nodesc")));
    }

    #[test]
    fn a_project_skill_never_replaces_one_of_the_users_own() {
        let user = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let skill = |root: &Path, name: &str, body: &str| {
            std::fs::create_dir_all(root.join(name)).unwrap();
            std::fs::write(
                root.join(name).join("SKILL.md"),
                format!("---\ndescription: {body}\n---\n{body}"),
            )
            .unwrap();
        };
        skill(user.path(), "deploy", "the user's own steps");
        // What a sandboxed command can write, and what the repository ships.
        skill(&ws.path().join(".agents/skills"), "deploy", "PLANTED");
        skill(&ws.path().join(".baton/skills"), "deploy", "SHIPPED");
        skill(&ws.path().join(".agents/skills"), "lint", "agents' lint");
        skill(&ws.path().join(".baton/skills"), "lint", "baton's lint");
        let (skills, notes) = skills_of(Some(user.path().to_path_buf()), ws.path());
        let by_name = |n: &str| skills.iter().find(|s| s.name == n).unwrap();
        assert_eq!(by_name("deploy").body().unwrap(), "the user's own steps");
        assert_eq!(by_name("lint").body().unwrap(), "baton's lint");
        assert_eq!(skills.len(), 2, "{skills:?}");
        assert_eq!(
            notes
                .iter()
                .filter(|n| n.contains("a skill of yours"))
                .count(),
            2,
            "{notes:?}"
        );
    }
}
