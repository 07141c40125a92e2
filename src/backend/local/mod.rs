//! The local backend: the in-process engine behind the `ChatBackend` trait.
//!
//! A request is rendered with the model's chat template, tokenized, and generated on a blocking
//! thread (the engine sits behind a mutex: one request at a time, which is also what keeps its
//! per-adapter prefix cache warm for the agent loop). Tokens become text through the streaming
//! detokenizer, stop strings are cut, and the text is split into answer, reasoning and tool calls
//! as it arrives.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::{Map, Value as Json};
use tokio::sync::mpsc;

use crate::backend::{
    BackendError, ChatBackend, ChatCompletion, ChatDelta, ChatRequest, ChatStream, Constraint,
    FinishReason, ModelInfo,
};
use crate::protocol::{ChatMessage, ReasoningEffort, Role, ToolCall};
pub(crate) mod pyjson;
pub mod template;
pub mod toolparse;

use crate::engine::tokenizer::Tokenizer;
use crate::engine::{Engine, FinishKind, GenerateRequest, SamplingParams};
use crate::protocol::DeviceChoice;
use crate::protocol::{Hop, TokenUsage};
use template::{ChatTemplate, TemplateInput, messages_to_json, tools_to_json};
use toolparse::{OutputEvent, OutputParser};

/// The model's text side, shared by the backend and the engine CLI: tokenizer, chat template
/// and the ids that end a turn.
/// Why a local model folder could not be opened (each names the file at fault).
#[derive(Debug, thiserror::Error)]
pub enum LocalOpenError {
    #[error(transparent)]
    Tokenizer(#[from] crate::engine::tokenizer::TokenizerError),
    #[error(transparent)]
    Template(#[from] template::TemplateError),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
}

pub struct ModelText {
    pub tokenizer: Tokenizer,
    pub template: ChatTemplate,
    /// Ids of `eos_token` from tokenizer_config.json (the template's end-of-turn), if any.
    pub template_stop_ids: Vec<u32>,
}

impl ModelText {
    /// Loads `ROOT/base/tokenizer.json` and the chat template of `ROOT/base`.
    pub fn load(root: &Path) -> Result<ModelText, LocalOpenError> {
        let base = root.join("base");
        let tokenizer = Tokenizer::from_file(&base.join("tokenizer.json"))?;
        let template = ChatTemplate::load(&base)?;
        let template_stop_ids = eos_token_text(&base)
            .and_then(|text| tokenizer.token_id(&text))
            .into_iter()
            .collect();
        Ok(ModelText {
            tokenizer,
            template,
            template_stop_ids,
        })
    }

    /// The prompt text of a chat request: messages, tools and switches through the template.
    pub fn render(&self, req: &ChatRequest) -> Result<String, template::TemplateError> {
        let mut kwargs = Map::new();
        let thinking = match (req.enable_thinking, req.reasoning_effort) {
            (Some(on), _) => Some(on),
            (None, Some(ReasoningEffort::None)) => Some(false),
            (None, _) => None,
        };
        if let Some(on) = thinking {
            kwargs.insert("enable_thinking".into(), Json::Bool(on));
        }
        if let Some(effort) = req.reasoning_effort {
            let name = serde_json::to_value(effort).unwrap_or(Json::Null);
            kwargs.insert("reasoning_effort".into(), name);
        }
        let input = TemplateInput {
            messages: messages_to_json(&req.messages),
            tools: (!req.tools.is_empty()).then(|| tools_to_json(&req.tools)),
            // Continuing the final message and opening a new turn exclude each other (HF
            // refuses both); the continuation wins, it is what the route hop needs.
            add_generation_prompt: req.add_generation_prompt && !req.continue_final_message,
            continue_final_message: req.continue_final_message,
            kwargs,
        };
        self.template.render(&input)
    }
}

/// `eos_token` of tokenizer_config.json (a string or `{content}`).
fn eos_token_text(base: &Path) -> Option<String> {
    let text = std::fs::read_to_string(base.join("tokenizer_config.json")).ok()?;
    let config: Json = serde_json::from_str(&text).ok()?;
    match config.get("eos_token")? {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// The in-process engine as a chat backend.
pub struct LocalBackend {
    root: PathBuf,
    engine: Arc<Mutex<Engine>>,
    text: Arc<ModelText>,
    adapters: Vec<String>,
    context_window: usize,
    stop_ids: Vec<u32>,
    device_name: String,
    device_notice: Option<String>,
}

impl LocalBackend {
    /// Why `--device auto` runs on the CPU, for the frontend to say once.
    pub fn device_notice(&self) -> Option<&str> {
        self.device_notice.as_deref()
    }

    /// Loads the model, its adapters, tokenizer and chat template from `root`.
    pub fn open(root: &Path, device: DeviceChoice) -> Result<LocalBackend, LocalOpenError> {
        let text = ModelText::load(root)?;
        let engine = Engine::load(root, device)?;
        let on_cuda = engine.device_name().to_lowercase().contains("cuda");
        let device_notice = (device == DeviceChoice::Auto && !on_cuda).then(|| {
            let why = engine.fallback_reason().unwrap_or("no CUDA device");
            format!("local engine on {} ({why})", engine.device_name())
        });
        tracing::info!("local engine on {}", engine.device_name());
        let config = engine.config();
        let mut stop_ids = config.eos_token_ids.clone();
        for id in &text.template_stop_ids {
            if !stop_ids.contains(id) {
                stop_ids.push(*id);
            }
        }
        Ok(LocalBackend {
            root: root.to_path_buf(),
            adapters: engine.adapters(),
            context_window: config.max_position_embeddings,
            device_name: engine.device_name(),
            device_notice,
            stop_ids,
            engine: Arc::new(Mutex::new(engine)),
            text: Arc::new(text),
        })
    }

    /// The adapter names (`L0`..`L3`), in engine order.
    pub fn adapters(&self) -> &[String] {
        &self.adapters
    }

    /// Where the engine runs (`cpu (2 threads)`, `cuda:0 …`).
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// Everything the generation thread needs, checked up front so errors come back before
    /// any stream exists.
    fn plan(&self, req: &ChatRequest) -> Result<Plan, BackendError> {
        let hop = req.hop;
        let engine_error = |message: String| BackendError::Engine { hop, message };
        let prompt_text = self
            .text
            .render(req)
            .map_err(|e| engine_error(e.to_string()))?;
        let prompt = self
            .text
            .tokenizer
            .encode(&prompt_text)
            .map_err(|e| engine_error(e.to_string()))?;
        if prompt.is_empty() {
            return Err(engine_error("the rendered prompt is empty".into()));
        }
        if prompt.len() >= self.context_window {
            return Err(BackendError::ContextOverflow {
                hop,
                url: self.describe(),
                message: format!(
                    "the prompt has {} tokens; the model's context window is {}",
                    prompt.len(),
                    self.context_window
                ),
            });
        }
        let room = self.context_window - prompt.len();
        let max_tokens = req.max_tokens.map_or(room, |n| (n as usize).min(room));
        let constraint = match &req.constraint {
            None => None,
            Some(Constraint::Choice { options }) => {
                if options.is_empty() {
                    return Err(engine_error(
                        "a choice constraint needs at least one option".into(),
                    ));
                }
                let mut sequences = Vec::with_capacity(options.len());
                for option in options {
                    let ids = self
                        .text
                        .tokenizer
                        .encode(option)
                        .map_err(|e| engine_error(e.to_string()))?;
                    if ids.is_empty() {
                        return Err(engine_error(format!(
                            "choice option {option:?} has no tokens"
                        )));
                    }
                    sequences.push(ids);
                }
                Some(sequences)
            }
        };
        let adapter = self.adapters.iter().position(|name| *name == req.model);
        let sampling = SamplingParams {
            temperature: req.sampling.temperature.unwrap_or(0.0).max(0.0),
            top_p: req.sampling.top_p.unwrap_or(1.0),
            top_k: req.sampling.top_k.unwrap_or(0) as usize,
            seed: req.sampling.seed,
        };
        Ok(Plan {
            starts_in_reasoning: OutputParser::prompt_opens_reasoning(&prompt_text),
            request: GenerateRequest {
                prompt,
                adapter,
                sampling,
                max_tokens,
                stop_ids: self.stop_ids.clone(),
                constraint,
            },
            stop_strings: req
                .sampling
                .stop
                .iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect(),
            stream: req.stream,
            hop,
        })
    }
}

/// A checked request, ready for the generation thread.
struct Plan {
    request: GenerateRequest,
    stop_strings: Vec<String>,
    starts_in_reasoning: bool,
    stream: bool,
    hop: Hop,
}

impl ChatBackend for LocalBackend {
    // The engine runs one request at a time: a speculative answer would hold the route hop
    // up until it finished.
    fn spare_slot(&self) -> Option<crate::backend::Slot> {
        None
    }

    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
        Box::pin(async move {
            let plan = self.plan(&req)?;
            let (tx, rx) = mpsc::unbounded_channel();
            let engine = Arc::clone(&self.engine);
            let text = Arc::clone(&self.text);
            let started = Instant::now();
            tokio::task::spawn_blocking(move || {
                let hop = plan.hop;
                let result = run_generation(&engine, &text, plan, started, &tx);
                if let Err(e) = result {
                    let _ = tx.send(Err(BackendError::Engine { hop, message: e }));
                }
            });
            Ok(receiver_stream(rx))
        })
    }

    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>> {
        let models = self
            .adapters
            .iter()
            .map(|name| ModelInfo {
                id: name.clone(),
                context_window: Some(self.context_window as u64),
            })
            .collect();
        Box::pin(async move { Ok(models) })
    }

    fn describe(&self) -> String {
        format!("local:{}", self.root.display())
    }

    fn count_prompt_tokens(&self, req: &ChatRequest) -> Option<u64> {
        let prompt = self.text.render(req).ok()?;
        let ids = self.text.tokenizer.encode(&prompt).ok()?;
        Some(ids.len() as u64)
    }
}

type DeltaSender = mpsc::UnboundedSender<Result<ChatDelta, BackendError>>;

fn receiver_stream(mut rx: mpsc::UnboundedReceiver<Result<ChatDelta, BackendError>>) -> ChatStream {
    Box::pin(futures_util::stream::poll_fn(move |cx| {
        match rx.poll_recv(cx) {
            Poll::Ready(item) => Poll::Ready(item),
            Poll::Pending => Poll::Pending,
        }
    }))
}

/// Runs one request on the engine, sending deltas and then the completion. Errors are returned
/// as text for the caller to wrap.
fn run_generation(
    engine: &Mutex<Engine>,
    text: &ModelText,
    plan: Plan,
    started: Instant,
    tx: &DeltaSender,
) -> Result<(), String> {
    let mut engine = engine.lock().map_err(|_| {
        "the engine is unusable: an earlier request panicked while holding it".to_string()
    })?;
    let mut assembler = Assembler::new(plan.starts_in_reasoning, plan.stream, tx.clone());
    let mut detok = text.tokenizer.detokenizer();
    let mut stops = StopStrings::new(plan.stop_strings);
    let mut failure: Option<String> = None;
    let mut first_token: Option<Duration> = None;
    let mut on_token = |id: u32| -> bool {
        first_token.get_or_insert_with(|| started.elapsed());
        let piece = match detok.push(id) {
            Ok(piece) => piece,
            Err(e) => {
                failure = Some(e.to_string());
                return false;
            }
        };
        let (out, stopped) = stops.push(&piece);
        assembler.push(&out);
        // Nobody listens any more (the caller dropped the stream): stop generating.
        !stopped && !tx.is_closed()
    };
    let output = engine
        .generate(&plan.request, &mut on_token)
        .map_err(|e| e.to_string())?;
    if let Some(e) = failure {
        return Err(e);
    }
    if !stops.stopped() {
        let tail = detok.finish().map_err(|e| e.to_string())?;
        let (out, _) = stops.push(&tail);
        assembler.push(&out);
        assembler.push(&stops.flush());
    }
    let message = assembler.finish();
    let finish_reason = if !message.tool_calls.is_empty() {
        FinishReason::ToolCalls
    } else if stops.stopped() {
        FinishReason::Stop
    } else {
        match output.finish {
            FinishKind::Stop | FinishKind::Constraint => FinishReason::Stop,
            FinishKind::Length => FinishReason::Length,
            FinishKind::Cancelled => FinishReason::Other,
        }
    };
    tracing::debug!(
        hop = %plan.hop,
        prompt_tokens = output.prompt_tokens,
        cached_tokens = output.cached_tokens,
        generated = output.tokens.len(),
        prefill_ms = output.prefill_time.as_secs_f64() * 1e3,
        decode_ms = output.decode_time.as_secs_f64() * 1e3,
        "local generation done"
    );
    let completion = ChatCompletion {
        message,
        finish_reason,
        usage: Some(TokenUsage {
            prompt_tokens: output.prompt_tokens as u64,
            completion_tokens: output.tokens.len() as u64,
            cached_tokens: Some(output.cached_tokens as u64),
            estimated: false,
        }),
        ttft: first_token,
        latency: started.elapsed(),
        conversation_id: None,
    };
    let _ = tx.send(Ok(ChatDelta::Completed(completion)));
    Ok(())
}

/// Builds the assistant message from parsed output and streams the deltas.
struct Assembler {
    parser: OutputParser,
    stream: bool,
    tx: DeltaSender,
    content: String,
    reasoning: String,
    tool_calls: Vec<ToolCall>,
}

impl Assembler {
    fn new(starts_in_reasoning: bool, stream: bool, tx: DeltaSender) -> Self {
        Assembler {
            parser: OutputParser::new(starts_in_reasoning),
            stream,
            tx,
            content: String::new(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
        }
    }

    fn push(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let events = self.parser.push(text);
        self.apply(events);
    }

    fn apply(&mut self, events: Vec<OutputEvent>) {
        for event in events {
            match event {
                OutputEvent::Text(t) => {
                    self.content.push_str(&t);
                    self.send(ChatDelta::Text(t));
                }
                OutputEvent::Reasoning(r) => {
                    self.reasoning.push_str(&r);
                    self.send(ChatDelta::Reasoning(r));
                }
                OutputEvent::ToolCall { call, error } => {
                    if let Some(error) = error {
                        tracing::warn!(tool = %call.name, "malformed tool call from the model: {error}");
                    }
                    let index = self.tool_calls.len();
                    self.send(ChatDelta::ToolCallStarted {
                        index,
                        id: call.id.clone(),
                        name: call.name.clone(),
                    });
                    self.send(ChatDelta::ToolCallArguments {
                        index,
                        fragment: call.arguments.clone(),
                    });
                    self.tool_calls.push(call);
                }
            }
        }
    }

    fn send(&self, delta: ChatDelta) {
        if self.stream {
            let _ = self.tx.send(Ok(delta));
        }
    }

    fn finish(mut self) -> ChatMessage {
        let events = self.parser.finish();
        self.apply(events);
        ChatMessage {
            role: Role::Assistant,
            content: self.content,
            reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
            tool_calls: self.tool_calls,
            tool_call_id: None,
        }
    }
}

/// Cuts the output at the first stop string, holding back text that may be the start of one.
struct StopStrings {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopStrings {
    fn new(stops: Vec<String>) -> Self {
        StopStrings {
            stops,
            held: String::new(),
            stopped: false,
        }
    }

    /// Adds text; returns what may be handed out and whether a stop string was reached.
    fn push(&mut self, text: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        if self.stops.is_empty() {
            return (text.to_string(), false);
        }
        self.held.push_str(text);
        let first_stop = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first_stop {
            self.stopped = true;
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        let keep = self
            .stops
            .iter()
            .map(|s| longest_suffix_prefix(&self.held, s))
            .max()
            .unwrap_or(0);
        let out: String = self.held.drain(..self.held.len() - keep).collect();
        (out, false)
    }

    fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    fn stopped(&self) -> bool {
        self.stopped
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `stop`, on a char boundary.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    (1..stop.len())
        .rev()
        .find(|&len| {
            len <= text.len()
                && stop.is_char_boundary(len)
                && text.is_char_boundary(text.len() - len)
                && text.ends_with(&stop[..len])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_cut_across_pieces() {
        let mut stops = StopStrings::new(vec!["END".into(), "\n\n".into()]);
        assert_eq!(stops.push("hello E"), ("hello ".to_string(), false));
        assert_eq!(stops.push("N"), (String::new(), false));
        assert_eq!(stops.push("D and more"), (String::new(), true));
        assert!(stops.stopped());
        let mut stops = StopStrings::new(vec!["END".into()]);
        assert_eq!(stops.push("abc EN"), ("abc ".to_string(), false));
        assert_eq!(stops.push("X"), ("ENX".to_string(), false));
        assert_eq!(stops.push("é E"), ("é ".to_string(), false));
        assert_eq!(stops.flush(), "E");
    }

    #[test]
    fn assembler_streams_calls_as_started_then_arguments() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut assembler = Assembler::new(false, true, tx);
        for piece in [
            "<think>plan</think>\n\nOn it.\n<tool_",
            "call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>",
            "\n<tool_call>{\"name\": \"read\", \"arguments\": {\"path\": 1}",
        ] {
            assembler.push(piece);
        }
        let message = assembler.finish();
        let mut deltas = Vec::new();
        while let Ok(item) = rx.try_recv() {
            deltas.push(item.unwrap());
        }
        assert_eq!(deltas[0], ChatDelta::Reasoning("plan".into()));
        assert_eq!(deltas[1], ChatDelta::Text("On it.".into()));
        let ChatDelta::ToolCallStarted { index: 0, id, name } = &deltas[2] else {
            panic!("call 0 starts: {:?}", deltas[2]);
        };
        assert_eq!(
            (id.as_str(), name.as_str()),
            (message.tool_calls[0].id.as_str(), "shell")
        );
        assert_eq!(
            deltas[3],
            ChatDelta::ToolCallArguments {
                index: 0,
                fragment: "{\"cmd\": \"ls\"}".into()
            }
        );
        // The second block never closed (generation ended): parsed at the end, same shape.
        assert!(
            matches!(&deltas[4], ChatDelta::ToolCallStarted { index: 1, name, .. } if name == "read")
        );
        assert_eq!(deltas.len(), 6);
        assert_eq!(message.content, "On it.");
        assert_eq!(message.reasoning.as_deref(), Some("plan"));
        assert_eq!(message.tool_calls.len(), 2);
        assert_eq!(message.tool_calls[1].arguments, "{\"path\": 1}");
    }
}
