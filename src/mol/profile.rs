//! MoL profiles: the reference harness's folder format (lora.md, route.md, intro.md, summary.md),
//! validated as the reference validates it, plus baton's built-in default profile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::protocol::Expert;

/// The four profile files, in the order the reference reads them.
const PROFILE_FILES: [&str; 4] = ["lora.md", "route.md", "intro.md", "summary.md"];

/// The public name and base model of the reference's shipped profiles (its hard-coded table).
const KNOWN_PROFILES: [(&str, &str); 2] = [
    ("Macaron-V1-Venti", "GLM-5.2"),
    ("Macaron-V1-Tall", "Qwen3.6-35B-A3B"),
];

/// The last line of route.md by convention; sent as the assistant prefill of the route hop.
pub const ROUTE_PREFILL: &str = "model_id=";

/// One expert as lora.md describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpertDef {
    pub id: Expert,
    /// The model name the engine serves this adapter under.
    pub adapter_name: String,
    /// Description text, trimmed (newlines kept).
    pub description: String,
}

/// A loaded, validated MoL profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Where it came from: the folder, or `built-in`.
    pub source: String,
    /// `{{MODEL_NAME}}`: the public model name.
    pub model_name: String,
    /// `{{BASE_MODEL}}`.
    pub base_model: String,
    /// The experts, sorted by id (L0..L3).
    pub experts: Vec<ExpertDef>,
    /// route.md after placeholder rendering, without the trailing `model_id=` stem.
    pub route_instruction: String,
    /// intro.md after placeholder rendering: the identity prompt of answer and summary hops.
    pub intro: String,
    /// summary.md: the final user message of the summary hop.
    pub summary_prompt: String,
    /// Optional per-expert system prompts (`experts/L0.md` … in the folder, placeholders
    /// rendered): where a profile defines one, that expert answers with it instead of baton's
    /// built-in prompt for it. The reference profiles define none.
    pub expert_prompts: [Option<String>; 4],
}

/// Why a profile could not be loaded. Every message names the file and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profile {dir}: cannot read {file}: {source}")]
    Read {
        dir: PathBuf,
        file: &'static str,
        source: std::io::Error,
    },
    #[error("profile {dir}: {file} is empty")]
    Empty { dir: String, file: &'static str },
    #[error("profile {dir}: lora.md line {line}: {message}")]
    Lora {
        dir: String,
        line: usize,
        message: String,
    },
    #[error("profile {dir}: lora.md: {message}")]
    LoraSet { dir: String, message: String },
    #[error("profile {dir}: route.md must contain {placeholder}")]
    RoutePlaceholder {
        dir: String,
        placeholder: &'static str,
    },
}

/// A profile file larger than this is refused: prompts are a few KiB.
const MAX_PROFILE_FILE_BYTES: u64 = 1 << 20;

/// Names the profile's `{{MODEL_NAME}}` and `{{BASE_MODEL}}` stand for.
#[derive(Debug, Clone, Default)]
pub struct ProfileNames {
    pub model_name: Option<String>,
    pub base_model: Option<String>,
}

impl Profile {
    /// Loads a profile folder. The model name defaults to the folder's name and the base model to
    /// the reference's table for its shipped profiles (else "an open base model").
    pub fn load(dir: &Path, names: &ProfileNames) -> Result<Profile, ProfileError> {
        let read_error = |file: &'static str, source: std::io::Error| ProfileError::Read {
            dir: dir.to_path_buf(),
            file,
            source,
        };
        // The folder may be a repository's (a project file's `profile`): its files are read
        // beneath it, never through a link (one pointing at `~/.aws/credentials` would hand
        // that file to the model as a prompt), a FIFO or a device, and bounded in size.
        let root = crate::untrusted_fs::Dir::open(dir).map_err(|e| read_error("the folder", e))?;
        let read = |rel: &str| -> std::io::Result<Option<String>> {
            root.read(Path::new(rel), MAX_PROFILE_FILE_BYTES)?
                .map(|bytes| {
                    String::from_utf8(bytes).map_err(|_| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text")
                    })
                })
                .transpose()
        };
        let mut texts = BTreeMap::new();
        for file in PROFILE_FILES {
            let text = read(file)
                .and_then(|t| t.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound)))
                .map_err(|e| read_error(file, e))?;
            texts.insert(file, text);
        }
        let folder = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        let model_name = names.model_name.clone().unwrap_or_else(|| folder.clone());
        let base_model = names.base_model.clone().unwrap_or_else(|| {
            KNOWN_PROFILES
                .iter()
                .find(|(name, _)| *name == model_name)
                .map(|(_, base)| base.to_string())
                .unwrap_or_else(|| "an open base model".to_string())
        });
        let mut profile =
            Profile::from_texts(&dir.display().to_string(), &texts, model_name, base_model)?;
        for expert in Expert::ALL {
            // Optional: a missing file is baton's default prompt; an unreadable one is an error.
            match read(&format!("experts/{expert}.md")) {
                Ok(Some(text)) if !text.trim().is_empty() => {
                    profile.expert_prompts[expert.index()] = Some(profile.render(text.trim()));
                }
                Ok(_) => {}
                Err(source) => return Err(read_error("experts/Lx.md", source)),
            }
        }
        Ok(profile)
    }

    /// baton's own default profile, written by this project (src/mol/default_profile/).
    #[allow(
        clippy::expect_used,
        reason = "the built-in texts are fixed and tested"
    )]
    pub fn builtin(names: &ProfileNames) -> Profile {
        let texts: BTreeMap<&str, String> = [
            ("lora.md", include_str!("default_profile/lora.md")),
            ("route.md", include_str!("default_profile/route.md")),
            ("intro.md", include_str!("default_profile/intro.md")),
            ("summary.md", include_str!("default_profile/summary.md")),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
        let model_name = names.model_name.clone().unwrap_or_else(|| "baton".into());
        let base_model = names
            .base_model
            .clone()
            .unwrap_or_else(|| "an open base model".into());
        // The built-in texts are tested below; a failure here is a bug in this file, not input.
        Profile::from_texts("built-in", &texts, model_name, base_model)
            .expect("the built-in profile is valid")
    }

    fn from_texts(
        dir: &str,
        texts: &BTreeMap<&str, String>,
        model_name: String,
        base_model: String,
    ) -> Result<Profile, ProfileError> {
        let get = |file: &'static str| -> Result<String, ProfileError> {
            let text = texts.get(file).map(|t| t.trim()).unwrap_or_default();
            if text.is_empty() {
                return Err(ProfileError::Empty {
                    dir: dir.to_string(),
                    file,
                });
            }
            Ok(text.to_string())
        };
        let render_common = |text: &str| {
            text.replace("{{MODEL_NAME}}", &model_name)
                .replace("{{BASE_MODEL}}", &base_model)
        };
        let experts = parse_lora_md(dir, &get("lora.md")?)?;
        let route = render_common(&get("route.md")?);
        for placeholder in ["{{LORA_DESCRIPTIONS}}", "{{ROUTE_LABELS}}"] {
            if !route.contains(placeholder) {
                return Err(ProfileError::RoutePlaceholder {
                    dir: dir.to_string(),
                    placeholder,
                });
            }
        }
        let descriptions = experts
            .iter()
            .map(|e| format!("{} = {}", e.id, collapse_whitespace(&e.description)))
            .collect::<Vec<_>>()
            .join("\n");
        let labels = experts
            .iter()
            .map(|e| e.id.label())
            .collect::<Vec<_>>()
            .join(" ");
        let rendered = route
            .replace("{{LORA_DESCRIPTIONS}}", &descriptions)
            .replace("{{ROUTE_LABELS}}", &labels);
        let route_instruction = strip_prefill_stem(&rendered);
        Ok(Profile {
            source: dir.to_string(),
            intro: render_common(&get("intro.md")?),
            summary_prompt: render_common(&get("summary.md")?),
            model_name,
            base_model,
            experts,
            route_instruction,
            expert_prompts: [None, None, None, None],
        })
    }

    /// `text` with `{{MODEL_NAME}}` and `{{BASE_MODEL}}` replaced.
    fn render(&self, text: &str) -> String {
        text.replace("{{MODEL_NAME}}", &self.model_name)
            .replace("{{BASE_MODEL}}", &self.base_model)
    }

    /// The adapter (engine model name) of an expert.
    pub fn adapter(&self, expert: Expert) -> &str {
        self.experts
            .iter()
            .find(|e| e.id == expert)
            .map(|e| e.adapter_name.as_str())
            .unwrap_or_else(|| expert.label())
    }

    /// The expert served under an adapter name, if any.
    pub fn expert_for_adapter(&self, adapter: &str) -> Option<Expert> {
        self.experts
            .iter()
            .find(|e| e.adapter_name == adapter)
            .map(|e| e.id)
    }

    /// The route labels in sorted order (the `Choice` constraint options).
    pub fn route_labels(&self) -> Vec<String> {
        self.experts
            .iter()
            .map(|e| e.id.label().to_string())
            .collect()
    }

    /// A short display name for an expert: the first words of its description.
    pub fn short_name(&self, expert: Expert) -> String {
        let text = self
            .experts
            .iter()
            .find(|e| e.id == expert)
            .map(|e| e.description.as_str())
            .unwrap_or("");
        let first = text.split(['.', ':', ';', ',']).next().unwrap_or("").trim();
        let words: Vec<&str> = first.split_whitespace().take(3).collect();
        words.join(" ")
    }
}

/// Removes the trailing `model_id=` stem (and trailing whitespace) from the rendered route text.
fn strip_prefill_stem(text: &str) -> String {
    let trimmed = text.trim_end();
    match trimmed.strip_suffix(ROUTE_PREFILL) {
        Some(rest) => rest.trim_end().to_string(),
        None => trimmed.to_string(),
    }
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Parses lora.md as the reference does: `## L<n>` sections, an `adapter_name:` line before the
/// `### Description` line, the description up to the next `### ` heading or section end.
fn parse_lora_md(dir: &str, text: &str) -> Result<Vec<ExpertDef>, ProfileError> {
    struct Section {
        id: String,
        line: usize,
        adapter: Option<String>,
        description: Option<Vec<String>>,
        in_description: bool,
    }
    let err = |line: usize, message: String| ProfileError::Lora {
        dir: dir.to_string(),
        line,
        message,
    };
    let mut sections: Vec<Section> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = raw.trim();
        if let Some(id) = section_id(line) {
            sections.push(Section {
                id,
                line: line_no,
                adapter: None,
                description: None,
                in_description: false,
            });
            continue;
        }
        let Some(section) = sections.last_mut() else {
            continue; // text before the first section (a title) is ignored
        };
        if section.in_description {
            if line.starts_with("### ") {
                section.in_description = false;
            } else if let Some(desc) = section.description.as_mut() {
                desc.push(raw.to_string());
                continue;
            }
        }
        if line == "### Description" {
            if section.adapter.is_none() {
                return Err(err(
                    line_no,
                    format!(
                        "section {}: adapter_name must come before ### Description",
                        section.id
                    ),
                ));
            }
            section.description = Some(Vec::new());
            section.in_description = true;
        } else if let Some(rest) = line.strip_prefix("adapter_name:") {
            let name = rest.trim();
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(err(
                    line_no,
                    format!(
                        "section {}: adapter_name must be one token, got '{name}'",
                        section.id
                    ),
                ));
            }
            section.adapter = Some(name.to_string());
        }
    }
    let mut by_id: BTreeMap<String, ExpertDef> = BTreeMap::new();
    for s in sections {
        let adapter = s
            .adapter
            .ok_or_else(|| err(s.line, format!("section {} has no adapter_name line", s.id)))?;
        let description = s
            .description
            .map(|lines| lines.join("\n").trim().to_string())
            .filter(|d| !d.is_empty())
            .ok_or_else(|| err(s.line, format!("section {} has no ### Description", s.id)))?;
        let id = Expert::parse(&s.id).ok_or_else(|| {
            err(
                s.line,
                format!("section {} is not one of L0, L1, L2, L3", s.id),
            )
        })?;
        if by_id.contains_key(&s.id) {
            return Err(err(s.line, format!("duplicate section {}", s.id)));
        }
        by_id.insert(
            s.id.clone(),
            ExpertDef {
                id,
                adapter_name: adapter,
                description,
            },
        );
    }
    let ids: Vec<&str> = by_id.keys().map(String::as_str).collect();
    if ids != ["L0", "L1", "L2", "L3"] {
        return Err(ProfileError::LoraSet {
            dir: dir.to_string(),
            message: format!("sections must be exactly L0, L1, L2, L3; found {ids:?}"),
        });
    }
    let experts: Vec<ExpertDef> = by_id.into_values().collect();
    let mut names: Vec<&str> = experts.iter().map(|e| e.adapter_name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    if names.len() != experts.len() {
        return Err(ProfileError::LoraSet {
            dir: dir.to_string(),
            message: "adapter names must be unique".into(),
        });
    }
    Ok(experts)
}

/// `## L<digits>` (case-insensitive) → upper-cased id.
fn section_id(line: &str) -> Option<String> {
    let rest = line.strip_prefix("## ")?;
    let rest = rest.trim();
    let digits = rest.strip_prefix(['L', 'l'])?;
    if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
        Some(format!("L{digits}"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_profile(dir: &Path, lora: &str, route: &str) {
        std::fs::write(dir.join("lora.md"), lora).unwrap();
        std::fs::write(dir.join("route.md"), route).unwrap();
        std::fs::write(
            dir.join("intro.md"),
            "I am {{MODEL_NAME}} on {{BASE_MODEL}}.",
        )
        .unwrap();
        std::fs::write(dir.join("summary.md"), "Summarize.").unwrap();
    }

    const LORA: &str = "# Title\n\n## L1\nadapter_name: agent\n### Description\nLong\n  tasks.\n\n## l0\nadapter_name: chat\n### Description\nChat.\n### Notes\nignored\n## L3\nadapter_name: ui\n### Description\nUI.\n## L2\nadapter_name: code\n### Description\nCode.\n";

    #[test]
    fn builtin_profile_is_valid_and_renders_placeholders() {
        let p = Profile::builtin(&ProfileNames::default());
        assert_eq!(p.experts.len(), 4);
        assert!(p.route_instruction.contains("L0 = General conversation"));
        assert!(p.route_instruction.contains("L0 L1 L2 L3"));
        assert!(!p.route_instruction.contains("{{"));
        assert!(!p.route_instruction.ends_with(ROUTE_PREFILL));
        assert!(p.intro.contains("baton"));
        assert_eq!(p.short_name(Expert::L2), "Software engineering");
    }

    #[test]
    fn loads_a_folder_sorted_with_collapsed_descriptions() {
        let dir = tempfile::tempdir().unwrap();
        let named = dir.path().join("Macaron-V1-Tall");
        std::fs::create_dir(&named).unwrap();
        write_profile(
            &named,
            LORA,
            "Text.\n{{LORA_DESCRIPTIONS}}\nLabels: {{ROUTE_LABELS}}\nmodel_id=\n",
        );
        let p = Profile::load(&named, &ProfileNames::default()).unwrap();
        assert_eq!(p.model_name, "Macaron-V1-Tall");
        assert_eq!(p.base_model, "Qwen3.6-35B-A3B");
        assert_eq!(p.adapter(Expert::L1), "agent");
        assert_eq!(p.expert_for_adapter("code"), Some(Expert::L2));
        assert_eq!(
            p.route_instruction,
            "Text.\nL0 = Chat.\nL1 = Long tasks.\nL2 = Code.\nL3 = UI.\nLabels: L0 L1 L2 L3"
        );
        assert_eq!(p.intro, "I am Macaron-V1-Tall on Qwen3.6-35B-A3B.");
    }

    #[test]
    fn rejects_bad_profiles_naming_file_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        write_profile(dir.path(), LORA, "no placeholders");
        let e = Profile::load(dir.path(), &ProfileNames::default()).unwrap_err();
        assert!(e.to_string().contains("{{LORA_DESCRIPTIONS}}"), "{e}");

        let missing = LORA.replace("## L3\nadapter_name: ui\n### Description\nUI.\n", "");
        write_profile(
            dir.path(),
            &missing,
            "{{LORA_DESCRIPTIONS}} {{ROUTE_LABELS}}",
        );
        let e = Profile::load(dir.path(), &ProfileNames::default()).unwrap_err();
        assert!(e.to_string().contains("exactly L0, L1, L2, L3"), "{e}");

        let dup = LORA.replace("adapter_name: ui", "adapter_name: code");
        write_profile(dir.path(), &dup, "{{LORA_DESCRIPTIONS}} {{ROUTE_LABELS}}");
        let e = Profile::load(dir.path(), &ProfileNames::default()).unwrap_err();
        assert!(e.to_string().contains("unique"), "{e}");

        let late = "## L0\n### Description\nx\nadapter_name: a\n";
        write_profile(dir.path(), late, "{{LORA_DESCRIPTIONS}} {{ROUTE_LABELS}}");
        let e = Profile::load(dir.path(), &ProfileNames::default()).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");

        std::fs::write(dir.path().join("summary.md"), "  \n").unwrap();
        write_profile(dir.path(), LORA, "{{LORA_DESCRIPTIONS}} {{ROUTE_LABELS}}");
        std::fs::write(dir.path().join("summary.md"), "  \n").unwrap();
        let e = Profile::load(dir.path(), &ProfileNames::default()).unwrap_err();
        assert!(e.to_string().contains("summary.md is empty"), "{e}");

        let e = Profile::load(&dir.path().join("nope"), &ProfileNames::default()).unwrap_err();
        assert!(e.to_string().contains("cannot read the folder"), "{e}");
        std::fs::remove_file(dir.path().join("lora.md")).unwrap();
        let e = Profile::load(dir.path(), &ProfileNames::default()).unwrap_err();
        assert!(e.to_string().contains("cannot read lora.md"), "{e}");
    }

    /// Red team (today's round): a repository's profile folder passed the "inside the project"
    /// rule while its `experts/L2.md` linked to `~/.aws/credentials`, which then went to the
    /// model as L2's system prompt. Profile files are read beneath the folder, never through a
    /// link.
    #[test]
    fn a_profile_file_that_is_a_link_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("credentials");
        std::fs::write(&secret, "AKIASECRET").unwrap();
        let profile = dir.path().join("prof");
        std::fs::create_dir_all(profile.join("experts")).unwrap();
        write_profile(&profile, LORA, "{{LORA_DESCRIPTIONS}} {{ROUTE_LABELS}}");
        std::os::unix::fs::symlink(&secret, profile.join("experts/L2.md")).unwrap();
        let e = Profile::load(&profile, &ProfileNames::default()).unwrap_err();
        assert!(e.to_string().contains("experts/Lx.md"), "{e}");
        assert!(!e.to_string().contains("AKIA"), "{e}");
        // The same for a required file, and for a link to a folder on the way.
        std::fs::remove_file(profile.join("experts/L2.md")).unwrap();
        std::fs::remove_file(profile.join("intro.md")).unwrap();
        std::os::unix::fs::symlink(&secret, profile.join("intro.md")).unwrap();
        assert!(Profile::load(&profile, &ProfileNames::default()).is_err());
        std::fs::remove_file(profile.join("intro.md")).unwrap();
        std::fs::write(profile.join("intro.md"), "Hi.").unwrap();
        std::fs::remove_dir(profile.join("experts")).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("L2.md"), "AKIASECRET").unwrap();
        std::os::unix::fs::symlink(&elsewhere, profile.join("experts")).unwrap();
        assert!(Profile::load(&profile, &ProfileNames::default()).is_err());
        // A plain profile folder still loads.
        std::fs::remove_file(profile.join("experts")).unwrap();
        assert!(Profile::load(&profile, &ProfileNames::default()).is_ok());
    }
}
