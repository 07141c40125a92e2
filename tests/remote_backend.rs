//! The remote backend against the in-process mock engine: wire shapes, streaming, errors, retries.

mod support;

use support::{MockEngine, MockReply, Script};

#[tokio::test]
async fn mock_engine_serves_scripted_replies() {
    let engine = MockEngine::scripted(Script::new().route("L2").answer("L2", "hello")).await;
    let client = reqwest::Client::new();
    let body = serde_json::json!({"model":"L2","messages":[{"role":"user","content":"hi"}],"stream":false});
    let resp: serde_json::Value = client
        .post(format!("{}/chat/completions", engine.url()))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resp["choices"][0]["message"]["content"], "hello");
    let _ = MockReply::hang();
}
