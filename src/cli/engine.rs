//! `baton engine …`: the local engine for scripting and debugging, like llama.cpp's tools.
//! `generate` runs one prompt (through the chat template, or raw) on the base model or an
//! adapter; `route` runs the MoL route hop exactly as the agent sends it and shows how the label
//! was decided.

use crate::protocol::stdio::{eprintln, println};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;

use crate::backend::ChatRequest;
use crate::backend::local::ModelText;
use crate::engine::{Engine, FinishKind, GenerateRequest, SamplingParams};
use crate::mol::profile::{Profile, ProfileNames};
use crate::mol::route::route_request;
use crate::protocol::ChatMessage;
use crate::protocol::DeviceChoice;
use crate::protocol::Hop;

/// `baton engine`: run the local engine directly.
#[derive(Debug, clap::Args)]
pub struct EngineArgs {
    #[command(subcommand)]
    pub command: EngineCommand,
}

impl EngineArgs {
    /// Fills in what the global flags say (`--local ROOT`, `--device`, `--profile`): the engine
    /// subcommands share them with the rest of baton. `--local` is required.
    pub fn with_globals(
        mut self,
        local: Option<PathBuf>,
        device: DeviceChoice,
        profile: Option<PathBuf>,
    ) -> Result<EngineArgs, String> {
        let local = local.ok_or(
            "baton engine: --local ROOT is required (a folder with base/ and loras/L0..L3)",
        )?;
        match &mut self.command {
            EngineCommand::Generate(g) => {
                g.local = local;
                g.device = device;
            }
            EngineCommand::Route(r) => {
                r.local = local;
                r.device = device;
                r.profile = profile;
            }
        }
        Ok(self)
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum EngineCommand {
    /// Generate text for one prompt.
    Generate(GenerateArgs),
    /// Run the route hop on a request text and show the chosen expert.
    Route(RouteArgs),
}

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["prompt", "raw"]))]
pub struct GenerateArgs {
    /// Model root: ROOT/base (config, weights, tokenizer) and ROOT/loras/L0..L3.
    /// The model folder (the global `--local ROOT` flag).
    #[arg(skip)]
    pub local: PathBuf,
    /// Adapter to use (L0..L3); the base model when absent.
    #[arg(long)]
    pub adapter: Option<String>,
    /// Text sent as one user message through the chat template.
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Text tokenized as is (special tokens such as <|im_start|> are recognised).
    #[arg(long, value_name = "TEXT")]
    pub raw: Option<String>,
    /// New tokens at most.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus sampling mass (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Thinking switch passed to the template (`enable_thinking`), with --prompt.
    #[arg(long)]
    pub thinking: Option<bool>,
    /// The device (the global `--device` flag).
    #[arg(skip)]
    pub device: DeviceChoice,
    /// Print one JSON object: prompt ids, generated ids, text, timings.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct RouteArgs {
    /// Model root: ROOT/base and ROOT/loras/L0..L3.
    /// The model folder (the global `--local ROOT` flag).
    #[arg(skip)]
    pub local: PathBuf,
    /// The request text to classify.
    pub text: String,
    /// MoL profile folder (lora.md, route.md, intro.md, summary.md); baton's own when absent.
    /// (the global `--profile` flag)
    #[arg(skip)]
    pub profile: Option<PathBuf>,
    /// The device (the global `--device` flag).
    #[arg(skip)]
    pub device: DeviceChoice,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs `baton engine …`; returns the process exit code.
pub fn run(args: EngineArgs) -> i32 {
    let result = match args.command {
        EngineCommand::Generate(a) => generate(a),
        EngineCommand::Route(a) => route(a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("baton engine: {e:#}");
            1
        }
    }
}

/// Loads the engine, saying so on stderr when `auto` fell back to the CPU.
fn load_engine(root: &Path, device: DeviceChoice) -> anyhow::Result<Engine> {
    let engine = Engine::load(root, device)
        .with_context(|| format!("cannot load the model under {}", root.display()))?;
    if device == DeviceChoice::Auto && !engine.device_name().to_lowercase().contains("cuda") {
        let why = engine.fallback_reason().unwrap_or("no CUDA device");
        eprintln!(
            "baton engine: no CUDA device in use, running on {} ({why})",
            engine.device_name()
        );
    }
    Ok(engine)
}

fn adapter_index(engine: &Engine, name: Option<&str>) -> anyhow::Result<Option<usize>> {
    let Some(name) = name else {
        return Ok(None);
    };
    let adapters = engine.adapters();
    match adapters.iter().position(|a| a == name) {
        Some(i) => Ok(Some(i)),
        None => bail!(
            "no adapter {name:?} under {}/loras (found: {})",
            engine.root().display(),
            if adapters.is_empty() {
                "none".to_string()
            } else {
                adapters.join(", ")
            }
        ),
    }
}

fn stop_ids(engine: &Engine, text: &ModelText) -> Vec<u32> {
    let mut ids = engine.config().eos_token_ids.clone();
    for id in &text.template_stop_ids {
        if !ids.contains(id) {
            ids.push(*id);
        }
    }
    ids
}

/// What `generate` produced; the `--json` output.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GenerateReport {
    pub device: String,
    pub adapter: Option<String>,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    pub text: String,
    pub finish: FinishKind,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub total_ms: f64,
    pub prefill_tokens_per_s: Option<f64>,
    pub decode_tokens_per_s: Option<f64>,
}

fn generate(args: GenerateArgs) -> anyhow::Result<()> {
    let json = args.json;
    let mut stdout = std::io::stdout();
    let report = generate_report(&args, &mut |piece| {
        if !json {
            // The model's raw text: escape sequences in it must not reach the terminal.
            let piece = crate::protocol::terminal_safe(piece);
            let _ = stdout.write_all(piece.as_bytes());
            let _ = stdout.flush();
        }
    })?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!();
        eprintln!(
            "[{}] prompt {} tokens ({} cached), prefill {:.1} ms, {} generated in {:.1} ms{}",
            report.device,
            report.prompt_tokens,
            report.cached_tokens,
            report.prefill_ms,
            report.generated_ids.len(),
            report.decode_ms,
            report
                .decode_tokens_per_s
                .map(|r| format!(" ({r} tok/s)"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// Runs `generate`, handing each complete piece of text to `on_text` as it is generated.
pub fn generate_report(
    args: &GenerateArgs,
    on_text: &mut dyn FnMut(&str),
) -> anyhow::Result<GenerateReport> {
    let text = ModelText::load(&args.local)?;
    let prompt_text = match (&args.prompt, &args.raw) {
        (Some(prompt), _) => {
            let mut req = ChatRequest::new(
                args.adapter.clone().unwrap_or_default(),
                vec![ChatMessage::user(prompt.clone())],
                Hop::Answer,
            );
            req.enable_thinking = args.thinking;
            text.render(&req)?
        }
        (None, Some(raw)) => raw.clone(),
        (None, None) => bail!("give --prompt TEXT or --raw TEXT"),
    };
    let prompt = text.tokenizer.encode(&prompt_text)?;
    if prompt.is_empty() {
        bail!("the prompt has no tokens");
    }
    let mut engine = load_engine(&args.local, args.device)?;
    let request = GenerateRequest {
        prompt: prompt.clone(),
        adapter: adapter_index(&engine, args.adapter.as_deref())?,
        sampling: SamplingParams {
            temperature: args.temperature.max(0.0),
            top_p: args.top_p,
            top_k: args.top_k,
            seed: args.seed,
        },
        max_tokens: args.max_tokens,
        stop_ids: stop_ids(&engine, &text),
        constraint: None,
    };
    let mut detok = text.tokenizer.detokenizer();
    let mut out = String::new();
    let mut failure = None;
    let started = Instant::now();
    let output = engine.generate(&request, &mut |id| match detok.push(id) {
        Ok(piece) => {
            on_text(&piece);
            out.push_str(&piece);
            true
        }
        Err(e) => {
            failure = Some(e);
            false
        }
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    let tail = detok.finish()?;
    on_text(&tail);
    out.push_str(&tail);
    Ok(GenerateReport {
        device: engine.device_name(),
        adapter: args.adapter.clone(),
        prompt_ids: prompt,
        generated_ids: output.tokens.clone(),
        text: out,
        finish: output.finish,
        prompt_tokens: output.prompt_tokens,
        cached_tokens: output.cached_tokens,
        prefill_ms: ms(output.prefill_time),
        decode_ms: ms(output.decode_time),
        total_ms: ms(started.elapsed()),
        prefill_tokens_per_s: per_second(
            output.prompt_tokens.saturating_sub(output.cached_tokens),
            output.prefill_time,
        ),
        decode_tokens_per_s: per_second(output.tokens.len(), output.decode_time),
    })
}

/// What `route` decided; the `--json` output.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RouteReport {
    pub label: String,
    /// How the label was decided, in words.
    pub decided_by: String,
    /// The adapter the route hop ran on (the profile's L0).
    pub adapter: String,
    /// The profile folder, or `built-in`.
    pub profile: String,
    pub device: String,
    /// Each label's log-probability, summed over its tokens.
    pub label_logprobs: serde_json::Map<String, serde_json::Value>,
    /// Tokens all labels share, appended without sampling.
    pub forced_tokens: usize,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub total_ms: f64,
}

fn route(args: RouteArgs) -> anyhow::Result<()> {
    let report = route_report(&args)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    println!("{}", report.label);
    println!("decided: {}", report.decided_by);
    for (label, logprob) in &report.label_logprobs {
        let mark = if *label == report.label { "  <-" } else { "" };
        println!(
            "  {label}  log p = {:>9.4}{mark}",
            logprob.as_f64().unwrap_or(f64::NAN)
        );
    }
    println!(
        "[{}] prompt {} tokens ({} cached), prefill {:.1} ms, decode {:.1} ms, total {:.1} ms",
        report.device,
        report.prompt_tokens,
        report.cached_tokens,
        report.prefill_ms,
        report.decode_ms,
        report.total_ms
    );
    Ok(())
}

/// Runs the route hop for `args.text` exactly as the MoL layer builds it (`route_request`),
/// through the same template path as the local backend.
pub fn route_report(args: &RouteArgs) -> anyhow::Result<RouteReport> {
    let profile = match &args.profile {
        Some(dir) => Profile::load(dir, &ProfileNames::default())?,
        None => Profile::builtin(&ProfileNames::default()),
    };
    let text = ModelText::load(&args.local)?;
    let req = route_request(&profile, &args.text);
    let labels = profile.route_labels();
    let prompt = text.tokenizer.encode(&text.render(&req)?)?;
    let mut options = Vec::with_capacity(labels.len());
    for label in &labels {
        options.push(text.tokenizer.encode(label)?);
    }
    let forced = shared_prefix_len(&options);
    let mut engine = load_engine(&args.local, args.device)?;
    let request = GenerateRequest {
        prompt,
        adapter: adapter_index(&engine, Some(&req.model))?,
        sampling: SamplingParams::default(),
        max_tokens: req.max_tokens.map_or(24, |n| n as usize),
        stop_ids: stop_ids(&engine, &text),
        constraint: Some(options),
    };
    let started = Instant::now();
    let output = engine.generate(&request, &mut |_| true)?;
    let total = started.elapsed();
    let label = match output.choice {
        Some(i) if i < labels.len() => labels[i].clone(),
        _ => text.tokenizer.decode(&output.tokens)?,
    };
    let logprobs = output.choice_logprobs.clone().unwrap_or_default();
    Ok(RouteReport {
        label,
        decided_by: format!(
            "constrained to {} labels on adapter {}: {} shared token(s) forced, the rest chosen \
             from one forward pass",
            labels.len(),
            req.model,
            forced
        ),
        adapter: req.model.clone(),
        profile: profile.source.clone(),
        device: engine.device_name(),
        label_logprobs: labels
            .iter()
            .zip(logprobs.iter())
            .map(|(l, p)| (l.clone(), json!(p)))
            .collect(),
        forced_tokens: forced,
        prompt_tokens: output.prompt_tokens,
        cached_tokens: output.cached_tokens,
        prefill_ms: ms(output.prefill_time),
        decode_ms: ms(output.decode_time),
        total_ms: ms(total),
    })
}

/// Number of leading tokens every option shares (forced without sampling).
fn shared_prefix_len(options: &[Vec<u32>]) -> usize {
    let Some(first) = options.first() else {
        return 0;
    };
    (0..first.len())
        .take_while(|&i| options.iter().all(|o| o.get(i) == first.get(i)))
        .count()
}

fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn per_second(tokens: usize, d: std::time::Duration) -> Option<f64> {
    let secs = d.as_secs_f64();
    (secs > 0.0 && tokens > 0).then(|| (tokens as f64 / secs * 10.0).round() / 10.0)
}
