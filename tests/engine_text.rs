//! The text side of the local engine against the fixture's golden data: tokenizer ids and
//! decoded text, chat-template renderings, streaming detokenization, tool-call parsing.

use baton::backend::local::template::{ChatTemplate, TemplateInput};
use baton::engine::tokenizer::Tokenizer;
use serde_json::Value as Json;

use crate::support::golden::{self, fixture, golden_json};

fn tokenizer() -> Tokenizer {
    Tokenizer::from_file(&fixture().join("base/tokenizer.json")).expect("tokenizer loads")
}

#[test]
fn tokenizer_cases_match_golden_exactly() {
    let tok = tokenizer();
    let g = golden_json();
    let cases = g["tokenizer_cases"].as_array().expect("cases");
    assert!(cases.len() >= 10);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let ids = tok.encode(text).unwrap();
        assert_eq!(ids, golden::ids(&case["ids"]), "ids of {text:?}");
        assert_eq!(
            tok.decode(&ids).unwrap(),
            case["decoded"].as_str().unwrap(),
            "decoded {text:?}"
        );
    }
}

#[test]
fn prompt_ids_match_golden_exactly() {
    let tok = tokenizer();
    let g = golden_json();
    for (name, prompt) in g["prompts"].as_object().unwrap() {
        let ids = tok.encode(prompt["text"].as_str().unwrap()).unwrap();
        assert_eq!(ids, golden::ids(&prompt["ids"]), "prompt {name}");
    }
    for (label, ids) in g["label_token_ids"].as_object().unwrap() {
        assert_eq!(
            tok.encode(label).unwrap(),
            golden::ids(ids),
            "label {label}"
        );
    }
}

#[test]
fn template_cases_match_golden_exactly() {
    let template = ChatTemplate::load(&fixture().join("base")).expect("template loads");
    let g = golden_json();
    let cases = g["template_cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    for case in cases {
        let input = TemplateInput {
            messages: case["messages"].as_array().unwrap().clone(),
            tools: case["tools"].as_array().cloned(),
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
            continue_final_message: case["continue_final_message"].as_bool().unwrap(),
            kwargs: Default::default(),
        };
        let rendered = template.render(&input).expect("renders");
        assert_eq!(rendered, case["rendered"].as_str().unwrap());
    }
}

#[test]
fn golden_prompts_render_from_their_messages() {
    // The chat and route prompts of golden.json were made by apply_chat_template; rebuilding
    // them from messages must give the same text.
    let template = ChatTemplate::load(&fixture().join("base")).unwrap();
    let g = golden_json();
    let chat = TemplateInput {
        messages: vec![
            serde_json::json!({"role": "system", "content": "You are a coding agent."}),
            serde_json::json!({"role": "user", "content": "The test in src/lib.rs fails. Fix it and run cargo test."}),
        ],
        add_generation_prompt: true,
        ..Default::default()
    };
    assert_eq!(
        template.render(&chat).unwrap(),
        g["prompts"]["chat"]["text"].as_str().unwrap()
    );
    let route = TemplateInput {
        messages: vec![
            serde_json::json!({"role": "user", "content": "Refactor the parser module and run the tests.\n\nClassify the request above. Return one label from: L0 L1 L2 L3.\nmodel_id="}),
            serde_json::json!({"role": "assistant", "content": "model_id="}),
        ],
        continue_final_message: true,
        ..Default::default()
    };
    assert_eq!(
        template.render(&route).unwrap(),
        g["prompts"]["route"]["text"].as_str().unwrap()
    );
}

#[test]
fn continue_final_message_cuts_templates_that_ignore_it() {
    // A plain ChatML template that always closes every message: HF cuts the text right after
    // the final message's content.
    let source = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
                  {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let template = ChatTemplate::from_source(source, &serde_json::json!({})).unwrap();
    let input = TemplateInput {
        messages: vec![
            serde_json::json!({"role": "user", "content": "pick"}),
            serde_json::json!({"role": "assistant", "content": "model_id="}),
        ],
        continue_final_message: true,
        ..Default::default()
    };
    assert_eq!(
        template.render(&input).unwrap(),
        "<|im_start|>user\npick<|im_end|>\n<|im_start|>assistant\nmodel_id="
    );
    // Trailing spaces the template trims are cut after the trimmed text.
    let trimming = ChatTemplate::from_source(
        "{% for m in messages %}[{{ m.content | trim }}]{% endfor %}",
        &serde_json::json!({}),
    )
    .unwrap();
    let input = TemplateInput {
        messages: vec![serde_json::json!({"role": "assistant", "content": "abc  "})],
        continue_final_message: true,
        ..Default::default()
    };
    assert_eq!(trimming.render(&input).unwrap(), "[abc");
}

#[test]
fn template_features_hf_templates_use() {
    // Python string methods, tojson with indent, raise_exception, special tokens, kwargs.
    let source = "{{ bos_token }}{% if enable_thinking is defined and enable_thinking is false %}nothink {% endif %}\
                  {{ messages[0].content.strip().split(',')[1] }}|{{ messages[0] | tojson(indent=2) }}|\
                  {% for k, v in messages[0].items() %}{{ k }};{% endfor %}";
    let config = serde_json::json!({"bos_token": {"content": "<s>"}, "eos_token": "</s>"});
    let template = ChatTemplate::from_source(source, &config).unwrap();
    let mut kwargs = serde_json::Map::new();
    kwargs.insert("enable_thinking".into(), Json::Bool(false));
    let input = TemplateInput {
        messages: vec![serde_json::json!({"role": "user", "content": " a,b "})],
        kwargs,
        ..Default::default()
    };
    assert_eq!(
        template.render(&input).unwrap(),
        "<s>nothink b|{\n  \"role\": \"user\",\n  \"content\": \" a,b \"\n}|role;content;"
    );
    let failing =
        ChatTemplate::from_source("{{ raise_exception('no system role') }}", &config).unwrap();
    let err = failing
        .render(&TemplateInput::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("no system role"), "{err}");
}

#[test]
fn template_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        "{\"eos_token\": \"x\"}",
    )
    .unwrap();
    let err = ChatTemplate::load(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("tokenizer_config.json") && err.contains("no chat template"),
        "{err}"
    );
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        "{\"chat_template\": \"{% for %}\"}",
    )
    .unwrap();
    let err = ChatTemplate::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("does not parse"), "{err}");
    std::fs::write(dir.path().join("tokenizer_config.json"), "not json").unwrap();
    let err = ChatTemplate::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not valid JSON"), "{err}");
}

#[test]
fn streaming_detokenization_never_splits_characters() {
    let tok = tokenizer();
    let texts = [
        "emoji 🚀🔥 and accents: café naïve",
        "数据结构与算法 mixed with English",
        "🧑‍💻 ✓ ünïcödé — “quotes” 日本語テキスト 한국어",
        "<|im_start|>user\nspecial tokens inline<|im_end|>",
        "plain ascii",
    ];
    for text in texts {
        let ids = tok.encode(text).unwrap();
        let mut detok = tok.detokenizer();
        let mut pieces = Vec::new();
        for id in &ids {
            let piece = detok.push(*id).unwrap();
            assert!(
                !piece.contains(char::REPLACEMENT_CHARACTER),
                "piece {piece:?} of {text:?} has a broken character"
            );
            pieces.push(piece);
        }
        let tail = detok.finish().unwrap();
        assert_eq!(tail, "", "everything was out before finish for {text:?}");
        assert_eq!(pieces.concat(), text);
        // Multi-byte characters are split over several byte tokens, so some pushes were empty.
        if !text.is_ascii() {
            assert!(pieces.iter().any(String::is_empty), "{text:?}");
        }
    }
}

#[test]
fn detokenizer_flushes_an_incomplete_tail_on_finish() {
    let tok = tokenizer();
    let ids = tok.encode("ok 🚀").unwrap();
    let mut detok = tok.detokenizer();
    let mut out = String::new();
    // Stop one byte short of the rocket: that character never completes.
    for id in &ids[..ids.len() - 1] {
        out += &detok.push(*id).unwrap();
    }
    assert_eq!(out, "ok ");
    let tail = detok.finish().unwrap();
    assert!(tail.contains(char::REPLACEMENT_CHARACTER), "{tail:?}");
}

mod toolparse {
    use baton::backend::local::toolparse::{INVALID_TOOL_NAME, OutputEvent, OutputParser};

    /// Feeds `text` in pieces of `chunk` characters, then finishes; returns every event.
    fn parse_in_chunks(text: &str, chunk: usize, starts_in_reasoning: bool) -> Vec<OutputEvent> {
        let mut parser = OutputParser::new(starts_in_reasoning);
        let chars: Vec<char> = text.chars().collect();
        let mut events = Vec::new();
        for piece in chars.chunks(chunk) {
            events.extend(parser.push(&piece.iter().collect::<String>()));
        }
        events.extend(parser.finish());
        events
    }

    /// Text, reasoning and calls, each joined.
    fn assemble(events: &[OutputEvent]) -> (String, String, Vec<(String, String, bool)>) {
        let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
        for event in events {
            match event {
                OutputEvent::Text(t) => text += t,
                OutputEvent::Reasoning(r) => reasoning += r,
                OutputEvent::ToolCall { call, error } => {
                    assert!(
                        call.id.starts_with("call_") && call.id.len() == 29,
                        "{}",
                        call.id
                    );
                    calls.push((call.name.clone(), call.arguments.clone(), error.is_some()))
                }
            }
        }
        (text, reasoning, calls)
    }

    #[test]
    fn think_text_and_calls_in_any_chunking() {
        let output = "<think>\nThe user wants files.\nList them.\n</think>\n\nI'll look.\n\
                      <tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls -l\"}}\n</tool_call>\n\
                      <tool_call>\n{\"name\": \"read\", \"arguments\": \"{\\\"path\\\": \\\"a.rs\\\"}\"}\n</tool_call>";
        for chunk in [1, 2, 3, 5, 7, 1000] {
            let events = parse_in_chunks(output, chunk, false);
            let (text, reasoning, calls) = assemble(&events);
            assert_eq!(
                reasoning, "The user wants files.\nList them.",
                "chunk {chunk}"
            );
            assert_eq!(text, "I'll look.", "chunk {chunk}");
            assert_eq!(
                calls,
                vec![
                    (
                        "shell".to_string(),
                        "{\"cmd\": \"ls -l\"}".to_string(),
                        false
                    ),
                    (
                        "read".to_string(),
                        "{\"path\": \"a.rs\"}".to_string(),
                        false
                    ),
                ],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn text_streams_before_a_call_closes() {
        let mut parser = OutputParser::new(false);
        let first = parser.push("Checking now.\n<tool_call>\n{\"name\": \"sh");
        assert_eq!(first, vec![OutputEvent::Text("Checking now.".into())]);
        assert!(
            parser.push("ell\", \"arguments\": {}}").is_empty(),
            "call held back"
        );
        let done = parser.push("\n</tool_call>");
        assert!(
            matches!(&done[..], [OutputEvent::ToolCall { call, error: None }] if call.name == "shell" && call.arguments == "{}")
        );
        assert!(parser.finish().is_empty());
    }

    #[test]
    fn reasoning_streams_incrementally() {
        let mut parser = OutputParser::new(true);
        assert_eq!(
            parser.push("\nstep one"),
            vec![OutputEvent::Reasoning("step one".into())]
        );
        assert_eq!(
            parser.push(", step two</th"),
            vec![OutputEvent::Reasoning(", step two".into())]
        );
        assert_eq!(
            parser.push("ink>\n\nanswer"),
            vec![OutputEvent::Text("answer".into())]
        );
        assert!(parser.finish().is_empty());
        assert!(OutputParser::prompt_opens_reasoning(
            "<|im_start|>assistant\n<think>\n"
        ));
        assert!(!OutputParser::prompt_opens_reasoning(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        ));
        assert!(!OutputParser::prompt_opens_reasoning(
            "<|im_start|>assistant\n"
        ));
    }

    #[test]
    fn malformed_calls_become_calls_with_an_error() {
        // Broken JSON with a readable name: the name is kept, the raw block is the arguments.
        let events = parse_in_chunks(
            "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\" \"-l\"}}\n</tool_call>",
            4,
            false,
        );
        let (_, _, calls) = assemble(&events);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, "shell");
        assert!(calls[0].2, "marked malformed");
        assert!(serde_json::from_str::<serde_json::Value>(&calls[0].1).is_err());
        let error = events
            .iter()
            .find_map(|e| match e {
                OutputEvent::ToolCall { error, .. } => error.clone(),
                _ => None,
            })
            .unwrap();
        assert!(
            error.contains("not valid JSON") && error.contains("<tool_call>"),
            "{error}"
        );

        // No name at all, not even an object.
        for body in ["[1, 2]", "{\"arguments\": {}}", "garbage {{{", ""] {
            let events = parse_in_chunks(&format!("<tool_call>{body}</tool_call>"), 3, false);
            let (_, _, calls) = assemble(&events);
            assert_eq!(calls.len(), 1, "{body}");
            assert_eq!(calls[0].0, INVALID_TOOL_NAME, "{body}");
            assert!(calls[0].2, "{body}");
        }
    }

    #[test]
    fn a_missing_final_brace_is_repaired() {
        let events = parse_in_chunks(
            "<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}\n</tool_call>",
            5,
            false,
        );
        let (_, _, calls) = assemble(&events);
        assert_eq!(
            calls,
            vec![("shell".to_string(), "{\"cmd\": \"ls\"}".to_string(), false)]
        );
    }

    #[test]
    fn unclosed_call_at_the_end_is_still_parsed() {
        let events = parse_in_chunks(
            "<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"path\": \".\"}}\n",
            6,
            false,
        );
        let (text, _, calls) = assemble(&events);
        assert_eq!(text, "");
        assert_eq!(
            calls,
            vec![("ls".to_string(), "{\"path\": \".\"}".to_string(), false)]
        );
    }

    #[test]
    fn tags_inside_text_and_partial_tags() {
        // A lone '<' and an unfinished tag at the end are ordinary text.
        let events = parse_in_chunks("if a < b then <tool", 1, false);
        assert_eq!(assemble(&events).0, "if a < b then <tool");
        // <think> after answer text is text, not reasoning.
        let events = parse_in_chunks("Use the <think> tag.", 2, false);
        let (text, reasoning, _) = assemble(&events);
        assert_eq!(
            (text.as_str(), reasoning.as_str()),
            ("Use the <think> tag.", "")
        );
        // Multi-byte text next to tags.
        let events = parse_in_chunks("<think>дума🚀</think>ответ 🚀", 1, false);
        let (text, reasoning, _) = assemble(&events);
        assert_eq!((text.as_str(), reasoning.as_str()), ("ответ 🚀", "дума🚀"));
    }
}

/// A Qwen3-style template (written for this test) using what real Qwen templates use: a
/// namespace, reverse slicing, `is string`, Python string methods with arguments, look-behind
/// by index, `tojson` of tool schemas and the `enable_thinking` switch.
const QWEN_STYLE_TEMPLATE: &str = r##"
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls or [] %}
            {%- if (loop.first and content) or (not loop.first) %}
                {{- '\n' }}
            {%- endif %}
            {%- if tool_call.function %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"##;

#[test]
fn qwen_style_template_renders_agent_turns() {
    use baton::backend::local::template::{messages_to_json, tools_to_json};
    use baton::protocol::{ChatMessage, ToolCall, ToolSpec};

    let template = ChatTemplate::from_source(QWEN_STYLE_TEMPLATE, &serde_json::json!({})).unwrap();
    let mut assistant = ChatMessage::assistant("");
    assistant.reasoning = Some("\nR\n".into());
    assistant.tool_calls = vec![
        ToolCall {
            id: "call_1".into(),
            name: "shell".into(),
            arguments: "{\"cmd\": \"ls\"}".into(),
        },
        ToolCall {
            id: "call_2".into(),
            name: "read".into(),
            arguments: "{\"path\": \"a.txt\"}".into(),
        },
    ];
    let messages = vec![
        ChatMessage::system("S"),
        ChatMessage::user("U"),
        assistant,
        ChatMessage::tool_result("call_1", "a.txt"),
        ChatMessage::tool_result("call_2", "hello"),
    ];
    let tools = vec![ToolSpec {
        name: "shell".into(),
        description: "run".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
    }];
    let mut kwargs = serde_json::Map::new();
    kwargs.insert("enable_thinking".into(), Json::Bool(false));
    let input = TemplateInput {
        messages: messages_to_json(&messages),
        tools: Some(tools_to_json(&tools)),
        add_generation_prompt: true,
        continue_final_message: false,
        kwargs,
    };
    let expected = "<|im_start|>system\nS\n\n# Tools\n<tools>\n\
        {\"type\": \"function\", \"function\": {\"name\": \"shell\", \"description\": \"run\", \"parameters\": {\"type\": \"object\", \"properties\": {\"cmd\": {\"type\": \"string\"}}, \"required\": [\"cmd\"]}}}\n\
        </tools><|im_end|>\n\
        <|im_start|>user\nU<|im_end|>\n\
        <|im_start|>assistant\n<think>\nR\n</think>\n\n\
        <tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>\n\
        <tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call><|im_end|>\n\
        <|im_start|>user\n<tool_response>\na.txt\n</tool_response>\n<tool_response>\nhello\n</tool_response><|im_end|>\n\
        <|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_eq!(template.render(&input).unwrap(), expected);
}

mod local_backend {
    use super::*;
    use baton::backend::local::LocalBackend;
    use baton::backend::local::toolparse::{OutputEvent, OutputParser};
    use baton::backend::{
        BackendError, ChatBackend, ChatDelta, ChatRequest, Constraint, FinishReason, complete,
    };
    use baton::protocol::ChatMessage;
    use baton::protocol::DeviceChoice;
    use baton::protocol::Hop;
    use futures_util::StreamExt;

    fn backend() -> LocalBackend {
        LocalBackend::open(&fixture(), DeviceChoice::Cpu).expect("fixture loads")
    }

    fn route_request(model: &str) -> ChatRequest {
        let g = golden_json();
        let mut req = ChatRequest::new(
            model,
            vec![
                ChatMessage::user(
                    "Refactor the parser module and run the tests.\n\n\
                     Classify the request above. Return one label from: L0 L1 L2 L3.\nmodel_id=",
                ),
                ChatMessage::assistant("model_id="),
            ],
            Hop::Route,
        );
        req.continue_final_message = true;
        req.add_generation_prompt = false;
        req.enable_thinking = Some(false);
        req.max_tokens = Some(24);
        req.stream = false;
        req.constraint = Some(Constraint::Choice {
            options: ["L0", "L1", "L2", "L3"].map(String::from).to_vec(),
        });
        assert!(g["prompts"]["route"]["ids"].is_array());
        req
    }

    fn chat_request(model: &str, max_tokens: u32) -> ChatRequest {
        let mut req = ChatRequest::new(
            model,
            vec![
                ChatMessage::system("You are a coding agent."),
                ChatMessage::user("The test in src/lib.rs fails. Fix it and run cargo test."),
            ],
            Hop::Answer,
        );
        req.max_tokens = Some(max_tokens);
        req
    }

    /// What the backend must make of golden's greedy tokens: decoded, then parsed.
    fn expected_answer(tok: &Tokenizer, ids: &[u32]) -> String {
        let text = tok.decode(ids).unwrap();
        let mut parser = OutputParser::new(false);
        let mut events = parser.push(&text);
        events.extend(parser.finish());
        events
            .into_iter()
            .filter_map(|e| match e {
                OutputEvent::Text(t) => Some(t),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn route_request_returns_golden_constrained_label() {
        let backend = backend();
        let g = golden_json();
        let route = &g["prompts"]["route"];
        for (model, golden_name) in [("L0", "L0"), ("L1", "L1"), ("L3", "L3"), ("base", "base")] {
            let done = complete(&backend, route_request(model))
                .await
                .expect("route completes");
            let want = route["by_adapter"][golden_name]["constrained_label"]
                .as_str()
                .unwrap();
            assert_eq!(done.message.content, want, "adapter {model}");
            assert_eq!(done.finish_reason, FinishReason::Stop);
            let usage = done.usage.expect("usage");
            assert_eq!(
                usage.prompt_tokens as usize,
                golden::ids(&route["ids"]).len()
            );
            assert_eq!(usage.completion_tokens, 2, "L + digit");
        }
    }

    #[tokio::test]
    async fn answer_streams_deltas_and_reports_usage() {
        let backend = backend();
        let tok = tokenizer();
        let g = golden_json();
        let chat = &g["prompts"]["chat"];
        let mut stream = backend.chat(chat_request("L2", 16)).await.unwrap();
        let mut streamed = String::new();
        let mut deltas = 0;
        let mut completion = None;
        while let Some(item) = stream.next().await {
            match item.expect("no stream error") {
                ChatDelta::Text(t) => {
                    assert!(!t.contains(char::REPLACEMENT_CHARACTER));
                    streamed.push_str(&t);
                    deltas += 1;
                }
                ChatDelta::Completed(done) => completion = Some(done),
                ChatDelta::Reasoning(_)
                | ChatDelta::ToolCallStarted { .. }
                | ChatDelta::ToolCallArguments { .. } => {}
            }
        }
        let done = completion.expect("the stream ends with a completion");
        let greedy = golden::ids(&chat["by_adapter"]["L2"]["greedy"]);
        assert_eq!(done.message.content, expected_answer(&tok, &greedy));
        assert_eq!(streamed, done.message.content);
        assert!(deltas > 1, "text arrived in several deltas ({deltas})");
        assert_eq!(done.finish_reason, FinishReason::Length);
        let usage = done.usage.unwrap();
        assert_eq!(
            usage.prompt_tokens as usize,
            golden::ids(&chat["ids"]).len()
        );
        assert_eq!(usage.completion_tokens, 16);
        assert!(done.ttft.is_some() && done.ttft.unwrap() <= done.latency);

        // The same conversation again on the same adapter: its prompt comes from the cache.
        let again = complete(&backend, chat_request("L2", 4)).await.unwrap();
        let cached = again.usage.unwrap().cached_tokens.unwrap_or(0);
        assert!(cached > 0, "prefix reuse on the second request");
    }

    #[tokio::test]
    async fn agent_loop_steps_reuse_the_previous_prompt() {
        // Each step re-sends the conversation plus the model's own answer: the previous prompt
        // (and as much of the answer as re-renders to the same tokens) comes from the cache.
        let backend = backend();
        let mut req = chat_request("L1", 6);
        let mut previous_prompt = 0;
        for step in 0..3 {
            let done = complete(&backend, req.clone()).await.unwrap();
            let usage = done.usage.unwrap();
            if step > 0 {
                let cached = usage.cached_tokens.unwrap_or(0);
                assert!(
                    cached >= previous_prompt,
                    "step {step}: {cached} cached of {} (previous prompt {previous_prompt})",
                    usage.prompt_tokens
                );
            }
            previous_prompt = usage.prompt_tokens;
            req.messages.push(done.message);
            req.messages
                .push(ChatMessage::user(format!("continue with step {step}")));
        }
    }

    #[tokio::test]
    async fn stop_strings_end_the_answer() {
        let backend = backend();
        let tok = tokenizer();
        let g = golden_json();
        let greedy = golden::ids(&g["prompts"]["chat"]["by_adapter"]["base"]["greedy"]);
        let full = expected_answer(&tok, &greedy);
        // Stop on a piece from the middle of the known greedy answer.
        let chars: Vec<char> = full.chars().collect();
        assert!(chars.len() > 6, "{full:?}");
        let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
        let cut = full.find(&stop).unwrap();
        let mut req = chat_request("base", 16);
        req.sampling.stop = vec![stop.clone()];
        let done = complete(&backend, req).await.unwrap();
        assert_eq!(
            done.message.content,
            full[..cut].trim_end(),
            "stop {stop:?}"
        );
        assert_eq!(done.finish_reason, FinishReason::Stop);
    }

    #[tokio::test]
    async fn models_errors_and_description() {
        let backend = backend();
        let models = backend.list_models().await.unwrap();
        let ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["L0", "L1", "L2", "L3"]);
        assert!(models.iter().all(|m| m.context_window == Some(4096)));
        assert!(backend.describe().starts_with("local:"));

        // A prompt longer than the context window is refused before generating.
        let long = "alpha beta gamma delta ".repeat(2000);
        let req = ChatRequest::new("L1", vec![ChatMessage::user(long)], Hop::Answer);
        match backend.chat(req).await {
            Err(BackendError::ContextOverflow { hop, message, .. }) => {
                assert_eq!(hop, Hop::Answer);
                assert!(message.contains("4096"), "{message}");
            }
            Err(other) => panic!("expected a context overflow, got {other}"),
            Ok(_) => panic!("expected a context overflow, got a stream"),
        }
        // An empty choice list is a clear error, not a hang.
        let mut req = route_request("L0");
        req.constraint = Some(Constraint::Choice { options: vec![] });
        let err = backend.chat(req).await.err().expect("refused");
        assert!(err.to_string().contains("at least one option"), "{err}");

        // A model directory without a model is an error naming the path.
        let dir = tempfile::tempdir().unwrap();
        let err = LocalBackend::open(dir.path(), DeviceChoice::Cpu)
            .err()
            .expect("no model");
        assert!(
            format!("{err:#}").contains(&dir.path().display().to_string()),
            "{err:#}"
        );
    }
}

mod engine_cli {
    use super::*;
    use baton::backend::complete;
    use baton::backend::local::LocalBackend;
    use baton::cli::engine::{EngineArgs, GenerateArgs, RouteArgs, generate_report, route_report};
    use baton::mol::profile::{Profile, ProfileNames};
    use baton::protocol::DeviceChoice;
    use clap::Parser;

    /// Parses `baton [global flags] engine ARGS` with the real command line, global flags
    /// (`--local`, `--device`, `--profile`) given after the subcommand as users may.
    fn parse(args: &[&str]) -> EngineArgs {
        let argv = ["baton", "engine"].into_iter().chain(args.iter().copied());
        let cli = baton::cli::Cli::try_parse_from(argv).expect("arguments parse");
        let flags = cli.flag_settings().expect("flags parse");
        let Some(baton::cli::Command::Engine(engine)) = cli.command else {
            panic!("parses as `baton engine`");
        };
        let device = flags.device.unwrap_or_default();
        engine
            .with_globals(flags.local, device, flags.profile)
            .expect("--local given")
    }

    #[test]
    fn generate_raw_matches_golden_greedy_tokens() {
        let g = golden_json();
        let root = fixture();
        let root = root.to_str().unwrap();
        for (prompt, adapter) in [("plain", None), ("chat", Some("L2"))] {
            let text = g["prompts"][prompt]["text"].as_str().unwrap();
            let mut argv = vec![
                "generate",
                "--local",
                root,
                "--raw",
                text,
                "--max-tokens",
                "16",
                "--device",
                "cpu",
                "--json",
            ];
            if let Some(a) = adapter {
                argv.extend(["--adapter", a]);
            }
            let baton::cli::engine::EngineCommand::Generate(args) = parse(&argv).command else {
                panic!("generate parses as generate");
            };
            let mut streamed = String::new();
            let report = generate_report(&args, &mut |piece| streamed.push_str(piece)).unwrap();
            let golden_by = &g["prompts"][prompt]["by_adapter"][adapter.unwrap_or("base")];
            assert_eq!(
                report.prompt_ids,
                golden::ids(&g["prompts"][prompt]["ids"]),
                "{prompt}"
            );
            assert_eq!(
                report.generated_ids,
                golden::ids(&golden_by["greedy"]),
                "{prompt}"
            );
            assert_eq!(streamed, report.text);
            assert_eq!(
                report.text,
                tokenizer().decode(&report.generated_ids).unwrap()
            );
            assert_eq!(report.prompt_tokens, report.prompt_ids.len());
            let json = serde_json::to_value(&report).unwrap();
            for key in [
                "prompt_ids",
                "generated_ids",
                "text",
                "prefill_ms",
                "decode_ms",
                "finish",
            ] {
                assert!(json.get(key).is_some(), "--json has {key}");
            }
        }
    }

    #[test]
    fn generate_prompt_goes_through_the_template() {
        let root = fixture();
        let args = GenerateArgs {
            local: root.clone(),
            adapter: Some("L1".into()),
            prompt: Some("hi".into()),
            raw: None,
            max_tokens: 3,
            temperature: 0.7,
            top_p: 0.9,
            top_k: 20,
            seed: Some(7),
            thinking: None,
            device: DeviceChoice::Cpu,
            json: true,
        };
        let report = generate_report(&args, &mut |_| {}).unwrap();
        let want = tokenizer()
            .encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
            .unwrap();
        assert_eq!(report.prompt_ids, want);
        assert!(report.generated_ids.len() <= 3);
        // Same seed, same tokens.
        let again = generate_report(&args, &mut |_| {}).unwrap();
        assert_eq!(again.generated_ids, report.generated_ids);

        let bad = GenerateArgs {
            adapter: Some("L9".into()),
            ..args
        };
        let err = format!("{:#}", generate_report(&bad, &mut |_| {}).unwrap_err());
        assert!(
            err.contains("L9") && err.contains("L0, L1, L2, L3"),
            "{err}"
        );
        // Exactly one of --prompt / --raw.
        let cli = |argv: &[&str]| baton::cli::Cli::try_parse_from(argv.iter().copied());
        assert!(cli(&["baton", "engine", "generate", "--local", "x"]).is_err());
        assert!(
            cli(&[
                "baton", "engine", "generate", "--local", "x", "--prompt", "a", "--raw", "b"
            ])
            .is_err()
        );
    }

    #[test]
    fn route_matches_the_backend_on_the_mol_route_prompt() {
        let root = fixture();
        let text = "Refactor the parser module and run the tests.";
        let argv = [
            "route",
            "--local",
            root.to_str().unwrap(),
            text,
            "--device",
            "cpu",
            "--json",
        ];
        let baton::cli::engine::EngineCommand::Route(args) = parse(&argv).command else {
            panic!("route parses as route");
        };
        let report = route_report(&args).unwrap();
        assert_eq!(report.adapter, "L0");
        assert_eq!(report.forced_tokens, 1, "the shared \"L\"");
        let logprobs: Vec<(String, f64)> = report
            .label_logprobs
            .iter()
            .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
            .collect();
        assert_eq!(
            logprobs.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["L0", "L1", "L2", "L3"]
        );
        let best = logprobs.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        assert_eq!(report.label, best.0, "greedy choice = most likely label");
        assert!(logprobs.iter().all(|(_, p)| *p < 0.0));

        // The agent's route hop through the local backend picks the same label.
        let profile = Profile::builtin(&ProfileNames::default());
        let req = baton::mol::route::route_request(&profile, text);
        let backend = LocalBackend::open(&root, DeviceChoice::Cpu).unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let done = runtime.block_on(complete(&backend, req)).unwrap();
        assert_eq!(done.message.content, report.label);
        assert_eq!(
            done.usage.unwrap().prompt_tokens as usize,
            report.prompt_tokens
        );

        let missing = RouteArgs {
            profile: Some(root.join("no-such-profile")),
            ..args
        };
        let err = format!("{:#}", route_report(&missing).unwrap_err());
        assert!(err.contains("no-such-profile"), "{err}");
    }
}

mod mol_hops {
    use super::*;
    use baton::backend::complete;
    use baton::backend::local::LocalBackend;
    use baton::mol::answer::{AnswerOptions, ReasoningWire, answer_request};
    use baton::mol::profile::{Profile, ProfileNames};
    use baton::mol::route::route;
    use baton::mol::summary::summarize;
    use baton::mol::timeline::Timeline;
    use baton::protocol::DeviceChoice;
    use baton::protocol::RouteDecision;
    use baton::protocol::{ChatMessage, ToolSpec};

    /// The MoL loop's three hops, built by the mol layer, served by the local engine: the
    /// route is the model's own decision (no fallback), the answer and summary complete.
    #[tokio::test]
    async fn route_answer_summary_on_the_fixture() {
        let backend = LocalBackend::open(&fixture(), DeviceChoice::Cpu).unwrap();
        let profile = Profile::builtin(&ProfileNames::default());
        let text = "The build fails in src/main.rs; fix it.";
        let routed = route(&backend, &profile, text, None).await;
        assert_eq!(routed.decision, RouteDecision::Model, "{:?}", routed.reason);
        assert!(routed.usage.prompt_tokens > 0);

        let head = vec![ChatMessage::system(profile.intro.clone())];
        let mut view = head.clone();
        view.push(ChatMessage::user(text));
        let tools = vec![ToolSpec {
            name: "shell".into(),
            description: "Run a shell command.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"cmd": {"type": "string"}}}),
        }];
        let opts = AnswerOptions {
            max_tokens: Some(8),
            ..Default::default()
        };
        let req = answer_request(
            profile.adapter(routed.expert),
            view,
            tools,
            &opts,
            ReasoningWire::HarnessMapping,
        );
        let answer = complete(&backend, req).await.unwrap();
        assert_eq!(answer.usage.unwrap().completion_tokens, 8);

        let mut timeline = Timeline::new();
        let task_id = timeline.open(routed.expert, text);
        timeline.push(answer.message);
        timeline.close(true);
        let task = timeline.task(task_id).unwrap();
        let summary = summarize(&backend, &profile, task, &head).await;
        assert_eq!(summary.error, None);
        assert!(summary.usage.completion_tokens > 0);
    }
}
