//! What an MCP server's tool list becomes before a model sees it: names the chat APIs accept
//! (`mcp__SERVER__TOOL`, at most 64 of `[A-Za-z0-9_-]`), and input schemas cut down to the
//! JSON Schema the OpenAI-compatible backends take for function parameters. A server is
//! somebody else's program: its descriptions and schemas are capped so one server cannot fill
//! the context window.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The longest function name the chat APIs accept.
const MAX_NAME: usize = 64;
/// A description longer than this is cut (a hostile or careless server's prose costs tokens
/// on every request).
pub const MAX_DESCRIPTION: usize = 1024;
/// A schema larger than this (serialized) is replaced by a permissive object schema.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;

/// Keywords the backends' function-parameter validators reject or ignore; dropped everywhere.
const DROPPED: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// `mcp__SERVER__TOOL`, with characters outside `[A-Za-z0-9_-]` turned into `_` and a long
/// name shortened with a hash of the full one, so two long names stay apart.
pub fn qualified_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let name = format!("mcp__{}__{}", clean(server), clean(tool));
    if name.len() <= MAX_NAME {
        return name;
    }
    let digest = Sha256::digest(format!("{server}\0{tool}").as_bytes());
    let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}_{hash}", &name[..MAX_NAME - 9])
}

/// The description the model reads: the server's, cut to `MAX_DESCRIPTION` characters, and
/// never empty.
pub fn description(server: &str, tool: &str, given: Option<&str>) -> String {
    let text = given.map(str::trim).filter(|d| !d.is_empty());
    match text {
        Some(d) if d.chars().count() > MAX_DESCRIPTION => {
            let cut: String = d.chars().take(MAX_DESCRIPTION).collect();
            format!("{cut}… (MCP server `{server}`)")
        }
        Some(d) => format!("{d} (MCP server `{server}`)"),
        None => format!("The `{tool}` tool of the MCP server `{server}`."),
    }
}

/// The input schema as the backends take it: an object schema at the top, every nested schema
/// with a `type` where one can be inferred, and no keywords they reject.
pub fn sanitize(schema: &Map<String, Value>) -> Value {
    let mut top = Value::Object(schema.clone());
    clean(&mut top);
    let Value::Object(mut top) = top else {
        return empty_object();
    };
    top.insert("type".into(), Value::String("object".into()));
    match top.get("properties") {
        Some(Value::Object(_)) => {}
        _ => {
            top.insert("properties".into(), Value::Object(Map::new()));
        }
    }
    if let Some(required) = top.get("required")
        && !required.is_array()
    {
        top.remove("required");
    }
    let out = Value::Object(top);
    if serde_json::to_string(&out).map_or(true, |s| s.len() > MAX_SCHEMA_BYTES) {
        return empty_object();
    }
    out
}

fn empty_object() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// Drops rejected keywords and fills in `type` where the shape says it, all the way down.
fn clean(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in DROPPED {
                map.remove(*key);
            }
            if !map.contains_key("type")
                && !map.contains_key("$ref")
                && !map.contains_key("anyOf")
                && !map.contains_key("oneOf")
                && !map.contains_key("allOf")
                && !map.contains_key("enum")
                && !map.contains_key("const")
            {
                if map.contains_key("properties") {
                    map.insert("type".into(), Value::String("object".into()));
                } else if map.contains_key("items") {
                    map.insert("type".into(), Value::String("array".into()));
                }
            }
            // `properties` maps names to schemas: its keys are names, not keywords.
            if let Some(Value::Object(props)) = map.get_mut("properties") {
                for prop in props.values_mut() {
                    clean(prop);
                }
            }
            for (key, child) in map.iter_mut() {
                if key != "properties" && key != "enum" && key != "const" && key != "default" {
                    clean(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(clean),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_fit_the_chat_apis() {
        assert_eq!(
            qualified_name("everything", "echo"),
            "mcp__everything__echo"
        );
        assert_eq!(
            qualified_name("fs", "read.file/v2"),
            "mcp__fs__read_file_v2"
        );
        let long = qualified_name("server", &"x".repeat(100));
        assert_eq!(long.len(), 64);
        assert_ne!(long, qualified_name("server", &"x".repeat(101)));
        assert!(
            long.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }

    #[test]
    fn schemas_are_cut_to_what_backends_take() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "properties": {
                "path": {"type": "string", "examples": ["a"]},
                "opts": {"properties": {"deep": {"type": "boolean"}}},
                "list": {"items": {"type": "string"}},
                "properties": {"type": "string"}
            },
            "required": "path"
        });
        let out = sanitize(schema.as_object().unwrap());
        assert_eq!(out["type"], "object");
        assert!(out.get("$schema").is_none());
        assert!(out.get("required").is_none());
        assert!(out["properties"]["path"].get("examples").is_none());
        assert_eq!(out["properties"]["opts"]["type"], "object");
        assert_eq!(out["properties"]["list"]["type"], "array");
        assert_eq!(out["properties"]["properties"]["type"], "string");
        let bare = sanitize(&Map::new());
        assert_eq!(bare, json!({"type": "object", "properties": {}}));
        let mut huge = Map::new();
        huge.insert(
            "description".into(),
            Value::String("x".repeat(MAX_SCHEMA_BYTES)),
        );
        assert_eq!(sanitize(&huge), json!({"type": "object", "properties": {}}));
    }

    #[test]
    fn descriptions_are_capped_and_never_empty() {
        assert!(description("s", "t", None).contains("`t`"));
        let long = description("s", "t", Some(&"y".repeat(5000)));
        assert!(long.chars().count() < MAX_DESCRIPTION + 40);
    }
}
