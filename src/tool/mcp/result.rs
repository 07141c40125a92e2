//! A `tools/call` result as the model reads it: text blocks as they are, structured content
//! as JSON, images, audio and binary resources described by type and size (never base64 into
//! the context), terminal escapes stripped, and the whole capped like shell output with a line
//! saying what was dropped.

use serde_json::Value;

use crate::tool::ToolResult;
use crate::tool::call::cap_text;
use crate::tool::sanitize::OutputFilter;

/// The size of base64 `data` once decoded, in bytes.
fn decoded_len(data: &str) -> usize {
    let trimmed = data.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

fn size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else if bytes < 1024 * 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// One content block as text.
fn block(item: &Value) -> String {
    match str_of(item, "type") {
        "text" => str_of(item, "text").to_string(),
        "image" => format!(
            "[image: {}, {} — not shown to the model]",
            or_unknown(str_of(item, "mimeType")),
            size(decoded_len(str_of(item, "data")))
        ),
        "audio" => format!(
            "[audio: {}, {} — not shown to the model]",
            or_unknown(str_of(item, "mimeType")),
            size(decoded_len(str_of(item, "data")))
        ),
        "resource" => {
            let resource = item.get("resource").unwrap_or(&Value::Null);
            let uri = str_of(resource, "uri");
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => format!(
                    "[resource {uri}: {}, {} of binary data — not shown to the model]",
                    or_unknown(str_of(resource, "mimeType")),
                    size(decoded_len(str_of(resource, "blob")))
                ),
            }
        }
        "resource_link" => {
            let name = str_of(item, "name");
            format!("[resource link: {} {name}]", str_of(item, "uri"))
        }
        other => format!("[content of type `{}`, not shown]", or_unknown(other)),
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "unknown type" } else { s }
}

/// Terminal escapes and control characters out, as for command output.
pub(super) fn plain(text: &str) -> String {
    let mut filter = OutputFilter::new();
    let mut out = filter.feed(text.as_bytes()).model;
    out.push_str(&filter.flush());
    out
}

/// The model's text for one result (the `CallToolResult` as JSON), capped at `cap` bytes.
pub fn to_tool_result(result: &Value, cap: usize) -> ToolResult {
    let content = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut parts: Vec<String> = content.iter().map(block).collect();
    let has_text = content.iter().any(|c| str_of(c, "type") == "text");
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null())
        && !has_text
    {
        parts.push(serde_json::to_string_pretty(structured).unwrap_or_default());
    }
    let mut text = plain(&parts.join("\n"));
    if text.trim().is_empty() {
        text = "(the tool returned no content)".into();
    }
    let text = cap_text(text, cap);
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        ToolResult::error(text)
    } else {
        ToolResult::ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolStatus;
    use serde_json::json;

    #[test]
    fn images_are_described_never_pasted() {
        let data = "A".repeat(4000);
        let r = to_tool_result(
            &json!({"content": [
                {"type": "text", "text": "here"},
                {"type": "image", "data": data, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a", "blob": "AAAA", "mimeType": "application/zip"}},
                {"type": "resource", "resource": {"uri": "file:///b", "text": "hello"}}
            ]}),
            16 * 1024,
        );
        assert_eq!(r.status, ToolStatus::Ok);
        assert!(
            r.content.contains("[image: image/png, 2.9 KiB"),
            "{}",
            r.content
        );
        assert!(!r.content.contains("AAAA"), "{}", r.content);
        assert!(
            r.content.contains("application/zip, 3 bytes"),
            "{}",
            r.content
        );
        assert!(r.content.contains("[resource file:///b]\nhello"));
    }

    #[test]
    fn structured_errors_and_escapes() {
        let r = to_tool_result(
            &json!({"content": [], "structuredContent": {"n": 1}, "isError": true}),
            1024,
        );
        assert_eq!(r.status, ToolStatus::Error);
        assert!(r.content.contains("\"n\": 1"));
        let r = to_tool_result(
            &json!({"content": [{"type": "text", "text": "a\u{1b}]0;pwn\u{7}b\u{1b}[31mc"}]}),
            1024,
        );
        assert_eq!(r.content, "abc");
        let r = to_tool_result(&json!({}), 1024);
        assert!(r.content.contains("no content"));
    }

    #[test]
    fn a_huge_result_is_capped_with_a_note() {
        let big = "line\n".repeat(2_000_000);
        let r = to_tool_result(
            &json!({"content": [{"type": "text", "text": big}]}),
            16 * 1024,
        );
        assert!(r.content.len() < 17 * 1024);
        assert!(r.content.contains("bytes ("), "{}", &r.content[..200]);
    }
}
