//! The text side of the local engine against the fixture's golden data: tokenizer ids and
//! decoded text, chat-template renderings, streaming detokenization, tool-call parsing.

use std::path::{Path, PathBuf};

use baton::engine::template::{ChatTemplate, TemplateInput};
use baton::engine::tokenizer::Tokenizer;
use serde_json::Value as Json;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen3")
}

fn golden() -> Json {
    let text = std::fs::read_to_string(fixture().join("golden.json")).expect("golden.json");
    serde_json::from_str(&text).expect("golden.json parses")
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_file(&fixture().join("base/tokenizer.json")).expect("tokenizer loads")
}

fn ids_of(v: &Json) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn tokenizer_cases_match_golden_exactly() {
    let tok = tokenizer();
    let g = golden();
    let cases = g["tokenizer_cases"].as_array().expect("cases");
    assert!(cases.len() >= 10);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let ids = tok.encode(text).unwrap();
        assert_eq!(ids, ids_of(&case["ids"]), "ids of {text:?}");
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
    let g = golden();
    for (name, prompt) in g["prompts"].as_object().unwrap() {
        let ids = tok.encode(prompt["text"].as_str().unwrap()).unwrap();
        assert_eq!(ids, ids_of(&prompt["ids"]), "prompt {name}");
    }
    for (label, ids) in g["label_token_ids"].as_object().unwrap() {
        assert_eq!(tok.encode(label).unwrap(), ids_of(ids), "label {label}");
    }
}

#[test]
fn template_cases_match_golden_exactly() {
    let template = ChatTemplate::load(&fixture().join("base")).expect("template loads");
    let g = golden();
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
    let g = golden();
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
