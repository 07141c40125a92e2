//! `baton serve`: its flags, and the hand-over from the builder's MoL service to the HTTP
//! frontend.

use crate::protocol::stdio::eprintln;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::app::ServeSetup;
use crate::config::Config;
use crate::protocol::exit;
use crate::serve::{AdmissionLimits, Keys, Metrics, ServeOptions};

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:30000")]
    pub listen: SocketAddr,

    /// The public model name clients ask for [default: the profile's model name].
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,

    /// How hops name their adapter upstream: `adapter` (vLLM: model=L2) or `base:adapter`
    /// (SGLang: model=BASE:L2).
    #[arg(long, value_name = "STYLE", default_value = "adapter", value_parser = ["adapter", "base:adapter"])]
    pub lora_name_style: String,

    /// The base model name for --lora-name-style base:adapter [default: the first non-adapter
    /// model the endpoint lists].
    #[arg(long, value_name = "NAME")]
    pub lora_base: Option<String>,

    /// The settings that are also flags of `baton serve` (`--route-constraint`,
    /// `--speculate`, `--follow-ups`); they override the configuration as root flags do.
    #[command(flatten)]
    pub settings: super::args::SettingFlags<{ super::args::SERVE }>,

    /// A file of client API keys, one a line (`#` comments); also BATON_SERVE_API_KEYS
    /// (comma-separated).
    #[arg(long, value_name = "FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// Listen on a non-loopback address without API keys.
    #[arg(long)]
    pub allow_unauthenticated: bool,

    /// Largest request body accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20)]
    pub max_body_bytes: usize,

    /// Most messages in one request, and items in any other array of it (Responses `input`,
    /// content parts, tools); checked while the body is parsed.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_messages: usize,

    /// Turns running at once.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_in_flight: usize,

    /// Requests waiting for a turn slot; beyond, 503 with Retry-After.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_queued: usize,

    /// Seconds a request waits for a turn slot.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub queue_timeout: f64,

    /// Requests in flight to the upstream engine at most [default: no cap].
    #[arg(long, value_name = "N")]
    pub upstream_concurrency: Option<usize>,

    /// Seconds a turn may go without a byte from upstream before it is ended.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub idle_timeout: u64,

    /// Conversations held in memory (least recently used dropped first).
    #[arg(long, value_name = "N", default_value_t = 5000)]
    pub max_conversations: usize,

    /// Seconds an idle conversation is kept.
    #[arg(long, value_name = "SECS", default_value_t = 1800)]
    pub conversation_ttl: u64,

    /// MiB of conversation text held in memory at most (least recently used dropped first).
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub max_state_mib: usize,

    /// Keep conversations and stored responses in this folder (created 0700), so a restarted
    /// server continues them [default: memory only].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Seconds SIGTERM waits for open requests, then for summaries.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub drain_timeout: u64,

    /// Seconds a client has to send a request's headers, and then its body.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub read_timeout: u64,
}

/// Builds the service from the configuration and serves it until SIGTERM.
pub async fn run(config: &Config, args: &ServeArgs) -> i32 {
    let mut config = config.clone();
    // The server runs the MoL loop itself, whatever mode a config file names for the client.
    config.mode = crate::protocol::Mode::Mol;
    let keys = match Keys::load(
        args.api_keys_file.as_deref(),
        std::env::var(crate::serve::auth::KEYS_ENV).ok().as_deref(),
    ) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("baton serve: {e}");
            return exit::USAGE;
        }
    };
    if let Some(dir) = &args.state_dir
        && let Err(why) = check_state_dir_owner(dir)
    {
        eprintln!("baton serve: --state-dir {}: {why}", dir.display());
        return exit::USAGE;
    }
    if !(args.queue_timeout.is_finite() && args.queue_timeout >= 0.0) {
        eprintln!("baton serve: --queue-timeout must be a number of seconds");
        return exit::USAGE;
    }
    let setup = ServeSetup {
        served_model_name: args.served_model_name.clone(),
        base_colon_adapter: (args.lora_name_style == "base:adapter")
            .then(|| args.lora_base.clone()),
        upstream_concurrency: args.upstream_concurrency,
        limits: crate::mol::StoreLimits {
            max_conversations: args.max_conversations.max(1),
            idle_ttl: Duration::from_secs(args.conversation_ttl),
            max_bytes: args.max_state_mib.saturating_mul(1 << 20),
        },
        state_dir: args.state_dir.clone(),
    };
    let metrics = Arc::new(Metrics::default());
    let service = match crate::app::mol_service(&config, &setup, metrics.clone()).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "baton serve: {}",
                crate::protocol::terminal_safe(&e.to_string())
            );
            return exit::USAGE;
        }
    };
    let opts = ServeOptions {
        listen: args.listen,
        keys,
        allow_unauthenticated: args.allow_unauthenticated,
        max_body_bytes: args.max_body_bytes,
        max_messages: args.max_messages.max(1),
        admission: AdmissionLimits {
            max_in_flight: args.max_in_flight.max(1),
            max_queued: args.max_queued,
            queue_timeout: Duration::from_secs_f64(args.queue_timeout),
        },
        idle_timeout: Duration::from_secs(args.idle_timeout.max(1)),
        keepalive: Duration::from_secs(10),
        drain_timeout: Duration::from_secs(args.drain_timeout),
        read_timeout: Duration::from_secs(args.read_timeout.max(1)),
    };
    match crate::serve::run(service, metrics, opts).await {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("baton serve: {e}");
            match e {
                crate::serve::ServeError::Exposure(_) => exit::USAGE,
                _ => exit::AGENT_ERROR,
            }
        }
    }
}

/// Red team finding 17: a `--state-dir` another user owns is refused. Its owner can rename
/// and replace what is in it under the server (even at mode 0700, and root's server reached
/// a folder chosen by nobody), so only a folder of the server's own user is taken. A missing
/// one is created, owner-only, by the state store.
fn check_state_dir_owner(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    // Red team round 32: a link another account planted where the folder is named (in a
    // shared sticky folder: `--state-dir /tmp/baton-state`) led root's server into a folder
    // of root's of that account's choosing. A link on the way is taken only from this user
    // or root.
    let absolute = std::path::absolute(dir).map_err(|e| format!("cannot resolve: {e}"))?;
    let mut on_the_way = std::path::PathBuf::new();
    for part in absolute.components() {
        on_the_way.push(part);
        if let Ok(m) = std::fs::symlink_metadata(&on_the_way)
            && m.file_type().is_symlink()
            && m.uid() != me
            && m.uid() != 0
        {
            return Err(format!(
                "{} is a link owned by uid {}, not by this server's user (uid {me}) or root: \
                 choose a folder of your own",
                on_the_way.display(),
                m.uid()
            ));
        }
    }
    match std::fs::metadata(dir) {
        Ok(meta) => {
            if meta.uid() == me {
                Ok(())
            } else {
                Err(format!(
                    "owned by uid {}, not by this server's user (uid {me}): choose a folder of \
                     your own",
                    meta.uid()
                ))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot stat: {e}")),
    }
}
