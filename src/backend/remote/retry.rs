//! When and how long to wait before another attempt: jittered exponential backoff, and the
//! server's `Retry-After` (seconds or an HTTP date), capped.

use std::time::Duration;

use rand::Rng;

use crate::protocol::Hop;

/// Reported before each retry, so a front end can say "retrying in 2 s (HTTP 503)".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryNotice {
    pub hop: Hop,
    /// What is retried, for people: `answer hop`, or `model list` for `GET /models`.
    pub what: String,
    /// 1 for the first retry.
    pub retry: u32,
    /// The most retries this request gets.
    pub max_retries: u32,
    pub delay: Duration,
    /// What failed: `HTTP 429: …` or the connect error.
    pub reason: String,
}

impl RetryNotice {
    /// One line for a person: `answer hop: retrying in 1.2 s (retry 1 of 3): HTTP 500: …`.
    pub fn message(&self) -> String {
        format!(
            "{}: retrying in {:.1} s (retry {} of {}): {}",
            self.what,
            self.delay.as_secs_f64(),
            self.retry,
            self.max_retries,
            self.reason
        )
    }
}

/// The wait before the one retry a failed connection gets: long enough for a server that is
/// just restarting to accept, short enough that a dead endpoint fails at once.
pub const QUICK_RETRY: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base: Duration,
    pub max: Duration,
    pub retry_after_cap: Duration,
}

impl RetryPolicy {
    /// Backoff before retry number `retry` (1-based): `base · 2^(retry-1)`, capped at `max`,
    /// then scaled by a random factor in [0.5, 1.0] so clients that failed together do not
    /// retry together.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exponent = retry.saturating_sub(1).min(16);
        let full = self.base.saturating_mul(1u32 << exponent).min(self.max);
        let factor: f64 = rand::rng().random_range(0.5..=1.0);
        full.mul_f64(factor)
    }

    /// The wait before retry number `retry` after an HTTP error: the server's `Retry-After`
    /// when it sent one (capped), else the backoff.
    pub fn delay(&self, retry: u32, retry_after: Option<&str>) -> Duration {
        match retry_after.and_then(parse_retry_after) {
            Some(wait) => wait.min(self.retry_after_cap),
            None => self.backoff(retry),
        }
    }
}

/// Statuses worth another attempt: rate limiting and server trouble (not 501/505, which will
/// not change).
pub fn is_retryable_status(status: u16) -> bool {
    status == 429 || ((500..=599).contains(&status) && status != 501 && status != 505)
}

/// `Retry-After` as a wait: delta-seconds (integer or decimal) or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = when.signed_duration_since(chrono::Utc::now());
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            base: Duration::from_millis(100),
            max: Duration::from_millis(1000),
            retry_after_cap: Duration::from_secs(30),
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let p = policy();
        for _ in 0..50 {
            let first = p.backoff(1);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            let third = p.backoff(3);
            assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400));
            assert!(p.backoff(30) <= Duration::from_millis(1000));
        }
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let p = policy();
        assert_eq!(p.delay(1, Some("1")), Duration::from_secs(1));
        assert_eq!(p.delay(1, Some("0.25")), Duration::from_millis(250));
        assert_eq!(p.delay(1, Some("3600")), Duration::from_secs(30));
        assert!(p.delay(1, Some("soon")) <= Duration::from_millis(100));
        assert!(p.delay(1, None) <= Duration::from_millis(100));
    }

    #[test]
    fn retry_after_dates() {
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        let later = (chrono::Utc::now() + chrono::TimeDelta::seconds(20)).to_rfc2822();
        let wait = parse_retry_after(&later).unwrap();
        assert!(wait > Duration::from_secs(15) && wait <= Duration::from_secs(20));
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn a_notice_reads_as_one_line() {
        let notice = RetryNotice {
            hop: Hop::Answer,
            what: "answer hop".into(),
            retry: 1,
            max_retries: 3,
            delay: Duration::from_millis(1500),
            reason: "HTTP 500: boom".into(),
        };
        assert_eq!(
            notice.message(),
            "answer hop: retrying in 1.5 s (retry 1 of 3): HTTP 500: boom"
        );
    }

    #[test]
    fn retryable_statuses() {
        for s in [429, 500, 502, 503, 504] {
            assert!(is_retryable_status(s), "{s}");
        }
        for s in [400, 401, 404, 413, 501, 505] {
            assert!(!is_retryable_status(s), "{s}");
        }
    }
}
