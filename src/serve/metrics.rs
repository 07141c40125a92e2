//! What the server counts, and `/metrics` in the Prometheus text format: per-hop latency
//! histograms and tokens, route decisions and fallbacks, requests by path and status, the
//! admission queue and the conversations held, and what the state folder (`--state-dir`)
//! wrote, loaded, skipped and deleted. As the service's observer it is also where a damaged
//! state file or a failed write reaches the operator's log (stderr).

use crate::protocol::stdio::eprintln;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::protocol::{
    Expert, HopSample, RouteDecision, ServiceObserver, SpeculationOutcome, SpeculationSample,
    StateEvent,
};

const BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, le) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {}",
                self.counts[i]
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Tables {
    hop_seconds: BTreeMap<&'static str, Histogram>,
    hop_tokens: BTreeMap<(&'static str, &'static str), u64>,
    hop_errors: BTreeMap<&'static str, u64>,
    routes: BTreeMap<(&'static str, &'static str), u64>,
    requests: BTreeMap<(String, u16), u64>,
    request_seconds: BTreeMap<String, Histogram>,
}

/// The server's counters. Shared by the HTTP layer and (as the observer) the MoL service.
#[derive(Debug, Default)]
pub struct Metrics {
    tables: Mutex<Tables>,
    pub in_flight: AtomicI64,
    pub queued: AtomicI64,
    conversations: AtomicU64,
    pub disconnects: AtomicU64,
    state: StateCounts,
    speculation: Speculation,
}

/// The state folder's counters.
#[derive(Debug, Default)]
struct StateCounts {
    persisted: AtomicU64,
    loaded: AtomicU64,
    corrupt: AtomicU64,
    ignored: AtomicU64,
    deleted: AtomicU64,
    write_errors: AtomicU64,
}

/// Speculative answer hops: kept, cancelled, never sent for want of a slot, and what the
/// cancelled ones cost.
#[derive(Debug, Default)]
struct Speculation {
    hits: AtomicU64,
    misses: AtomicU64,
    no_slot: AtomicU64,
    wasted_prompt: AtomicU64,
    wasted_completion: AtomicU64,
}

fn decision_name(d: RouteDecision) -> &'static str {
    match d {
        RouteDecision::Model => "model",
        RouteDecision::Fallback => "fallback",
        RouteDecision::Pinned => "pinned",
        RouteDecision::Sticky => "sticky",
        RouteDecision::FollowUp => "follow_up",
        RouteDecision::None => "none",
    }
}

impl Metrics {
    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A streamed turn whose client went away before its end (counted as status 499).
    pub fn client_gone(&self, path: &str, took: Duration) {
        self.disconnects.fetch_add(1, Ordering::Relaxed);
        self.request(path, 499, took);
    }

    /// One finished HTTP request.
    pub fn request(&self, path: &str, status: u16, took: Duration) {
        let mut t = self.tables();
        *t.requests.entry((path.to_string(), status)).or_default() += 1;
        t.request_seconds
            .entry(path.to_string())
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// The metrics page.
    pub fn render(&self) -> String {
        let t = self.tables();
        let mut out = String::new();
        out.push_str("# HELP baton_serve_hop_seconds Latency of each MoL hop sent upstream.\n");
        out.push_str("# TYPE baton_serve_hop_seconds histogram\n");
        for (hop, h) in &t.hop_seconds {
            h.render(
                &mut out,
                "baton_serve_hop_seconds",
                &format!("hop=\"{hop}\""),
            );
        }
        out.push_str(
            "# HELP baton_serve_hop_tokens_total Tokens per hop, prompt and completion.\n",
        );
        out.push_str("# TYPE baton_serve_hop_tokens_total counter\n");
        for ((hop, kind), n) in &t.hop_tokens {
            let _ = writeln!(
                out,
                "baton_serve_hop_tokens_total{{hop=\"{hop}\",kind=\"{kind}\"}} {n}"
            );
        }
        out.push_str("# HELP baton_serve_hop_errors_total Hops that failed.\n");
        out.push_str("# TYPE baton_serve_hop_errors_total counter\n");
        for (hop, n) in &t.hop_errors {
            let _ = writeln!(out, "baton_serve_hop_errors_total{{hop=\"{hop}\"}} {n}");
        }
        out.push_str(
            "# HELP baton_serve_route_decisions_total Who answered, and how that was decided.\n",
        );
        out.push_str("# TYPE baton_serve_route_decisions_total counter\n");
        let mut fallbacks = 0;
        for ((expert, decision), n) in &t.routes {
            if *decision == "fallback" {
                fallbacks += n;
            }
            let _ = writeln!(
                out,
                "baton_serve_route_decisions_total{{expert=\"{expert}\",decision=\"{decision}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP baton_serve_route_fallbacks_total Route hops that failed or gave no label.\n",
        );
        out.push_str("# TYPE baton_serve_route_fallbacks_total counter\n");
        let _ = writeln!(out, "baton_serve_route_fallbacks_total {fallbacks}");
        out.push_str("# HELP baton_serve_requests_total HTTP requests by path and status.\n");
        out.push_str("# TYPE baton_serve_requests_total counter\n");
        for ((path, status), n) in &t.requests {
            let _ = writeln!(
                out,
                "baton_serve_requests_total{{path=\"{path}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP baton_serve_request_seconds Time to a request's last byte.\n");
        out.push_str("# TYPE baton_serve_request_seconds histogram\n");
        for (path, h) in &t.request_seconds {
            h.render(
                &mut out,
                "baton_serve_request_seconds",
                &format!("path=\"{path}\""),
            );
        }
        let gauges = [
            (
                "baton_serve_in_flight",
                "Turns running now.",
                self.in_flight.load(Ordering::Relaxed),
            ),
            (
                "baton_serve_queued",
                "Requests waiting for admission.",
                self.queued.load(Ordering::Relaxed),
            ),
            (
                "baton_serve_conversations",
                "Conversations held in memory.",
                self.conversations.load(Ordering::Relaxed) as i64,
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
        let sp = &self.speculation;
        out.push_str(
            "# HELP baton_serve_speculations_total Speculative answer hops by outcome: hit (kept), \
             miss (cancelled), no_slot (not sent: no upstream slot to spare).\n\
             # TYPE baton_serve_speculations_total counter\n",
        );
        for (outcome, n) in [
            ("hit", &sp.hits),
            ("miss", &sp.misses),
            ("no_slot", &sp.no_slot),
        ] {
            let _ = writeln!(
                out,
                "baton_serve_speculations_total{{outcome=\"{outcome}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        out.push_str(
            "# HELP baton_serve_speculation_wasted_tokens_total Tokens cancelled speculative \
             answers cost: the prompt, and the completion generated before the cancel (exact when \
             the answer had finished, else estimated).\n\
             # TYPE baton_serve_speculation_wasted_tokens_total counter\n",
        );
        for (kind, n) in [
            ("prompt", &sp.wasted_prompt),
            ("completion", &sp.wasted_completion),
        ] {
            let _ = writeln!(
                out,
                "baton_serve_speculation_wasted_tokens_total{{kind=\"{kind}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP baton_serve_client_disconnects_total Turns abandoned by their client (rolled back).\n\
             # TYPE baton_serve_client_disconnects_total counter\n\
             baton_serve_client_disconnects_total {}",
            self.disconnects.load(Ordering::Relaxed)
        );
        let s = &self.state;
        let counters = [
            (
                "baton_serve_state_persisted_total",
                "Conversations and stored responses written to the state dir.",
                &s.persisted,
            ),
            (
                "baton_serve_state_loaded_total",
                "Entries read back from the state dir at startup.",
                &s.loaded,
            ),
            (
                "baton_serve_state_corrupt_total",
                "State files that could not be read back (skipped, moved aside).",
                &s.corrupt,
            ),
            (
                "baton_serve_state_ignored_total",
                "State files left alone (a newer format, not a regular file, an older copy of an entry).",
                &s.ignored,
            ),
            (
                "baton_serve_state_deleted_total",
                "State files deleted with their expired or evicted entries.",
                &s.deleted,
            ),
            (
                "baton_serve_state_write_errors_total",
                "State writes or deletes that failed (the state stayed in memory).",
                &s.write_errors,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        out
    }
}

impl ServiceObserver for Metrics {
    fn hop(&self, sample: HopSample) {
        let hop = sample.hop.as_str();
        let mut t = self.tables();
        t.hop_seconds
            .entry(hop)
            .or_default()
            .observe(sample.latency.as_secs_f64());
        *t.hop_tokens.entry((hop, "prompt")).or_default() += sample.usage.prompt_tokens;
        *t.hop_tokens.entry((hop, "completion")).or_default() += sample.usage.completion_tokens;
        if !sample.ok {
            *t.hop_errors.entry(hop).or_default() += 1;
        }
    }

    fn route(&self, expert: Expert, decision: RouteDecision) {
        *self
            .tables()
            .routes
            .entry((expert.label(), decision_name(decision)))
            .or_default() += 1;
    }

    fn conversations(&self, count: usize) {
        self.conversations.store(count as u64, Ordering::Relaxed);
    }

    fn state(&self, event: StateEvent) {
        let s = &self.state;
        let safe = crate::protocol::terminal_safe;
        match event {
            StateEvent::Persisted => {
                s.persisted.fetch_add(1, Ordering::Relaxed);
            }
            StateEvent::Loaded(n) => {
                s.loaded.fetch_add(n as u64, Ordering::Relaxed);
                eprintln!("baton serve: state dir: {n} conversations and stored responses loaded");
            }
            StateEvent::Corrupt { file, reason } => {
                s.corrupt.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "baton serve: state dir: skipped {}: {} (moved aside as .corrupt)",
                    safe(&file),
                    safe(&reason)
                );
            }
            StateEvent::Ignored { file, reason } => {
                s.ignored.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "baton serve: state dir: left {} alone: {}",
                    safe(&file),
                    safe(&reason)
                );
            }
            StateEvent::Deleted(n) => {
                s.deleted.fetch_add(n as u64, Ordering::Relaxed);
            }
            StateEvent::WriteFailed { reason } => {
                s.write_errors.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "baton serve: state dir: {} (kept in memory only)",
                    safe(&reason)
                );
            }
        }
    }

    fn speculation(&self, sample: SpeculationSample) {
        let sp = &self.speculation;
        let counter = match sample.outcome {
            SpeculationOutcome::Hit => &sp.hits,
            SpeculationOutcome::Miss => &sp.misses,
            SpeculationOutcome::NoSlot => &sp.no_slot,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        sp.wasted_prompt
            .fetch_add(sample.wasted_prompt_tokens, Ordering::Relaxed);
        sp.wasted_completion
            .fetch_add(sample.wasted_completion_tokens, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Hop, TokenUsage};

    #[test]
    fn the_page_is_prometheus_text() {
        let m = Metrics::default();
        m.hop(HopSample {
            hop: Hop::Route,
            latency: Duration::from_millis(200),
            usage: TokenUsage {
                prompt_tokens: 10,
                completion_tokens: 1,
                cached_tokens: None,
                estimated: false,
            },
            ok: true,
        });
        m.route(Expert::L2, RouteDecision::Fallback);
        m.request("/v1/chat/completions", 200, Duration::from_secs(1));
        let page = m.render();
        assert!(page.contains("baton_serve_hop_seconds_bucket{hop=\"route\",le=\"0.25\"} 1"));
        assert!(page.contains("baton_serve_hop_seconds_bucket{hop=\"route\",le=\"0.1\"} 0"));
        assert!(page.contains("baton_serve_hop_tokens_total{hop=\"route\",kind=\"prompt\"} 10"));
        assert!(page.contains("baton_serve_route_fallbacks_total 1"));
        m.speculation(SpeculationSample {
            outcome: SpeculationOutcome::Miss,
            wasted_prompt_tokens: 120,
            wasted_completion_tokens: 7,
        });
        m.speculation(SpeculationSample {
            outcome: SpeculationOutcome::Hit,
            wasted_prompt_tokens: 0,
            wasted_completion_tokens: 0,
        });
        let page = m.render();
        assert!(page.contains("baton_serve_speculations_total{outcome=\"miss\"} 1"));
        assert!(page.contains("baton_serve_speculations_total{outcome=\"hit\"} 1"));
        assert!(page.contains("baton_serve_speculations_total{outcome=\"no_slot\"} 0"));
        assert!(page.contains("baton_serve_speculation_wasted_tokens_total{kind=\"prompt\"} 120"));
        assert!(
            page.contains("baton_serve_speculation_wasted_tokens_total{kind=\"completion\"} 7")
        );
        assert!(page.contains(
            "baton_serve_requests_total{path=\"/v1/chat/completions\",status=\"200\"} 1"
        ));
        for line in page.lines().filter(|l| !l.starts_with('#')) {
            assert_eq!(line.split(' ').count(), 2, "{line}");
        }
    }
}
