//! Admission control: at most N turns run at once, at most M more wait (each for a bounded
//! time); beyond that a request is told to come back (503 + `Retry-After`) instead of piling
//! up behind an engine that is already saturated.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::errors::ApiError;
use super::metrics::Metrics;

#[derive(Debug, Clone)]
pub struct AdmissionLimits {
    pub max_in_flight: usize,
    pub max_queued: usize,
    pub queue_timeout: Duration,
}

pub struct Admission {
    permits: Arc<Semaphore>,
    limits: AdmissionLimits,
    metrics: Arc<Metrics>,
}

/// A running turn's place; dropping it lets the next one in.
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admission {
    pub fn new(limits: AdmissionLimits, metrics: Arc<Metrics>) -> Self {
        Admission {
            permits: Arc::new(Semaphore::new(limits.max_in_flight.max(1))),
            limits,
            metrics,
        }
    }

    fn admitted(&self, permit: OwnedSemaphorePermit) -> Admitted {
        self.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        Admitted {
            _permit: permit,
            metrics: self.metrics.clone(),
        }
    }

    pub async fn enter(&self) -> Result<Admitted, ApiError> {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return Ok(self.admitted(p));
        }
        let queued = self.metrics.queued.fetch_add(1, Ordering::Relaxed);
        let result = if queued as usize >= self.limits.max_queued {
            Err(ApiError::overloaded(
                "the server is at capacity; retry shortly",
            ))
        } else {
            match tokio::time::timeout(
                self.limits.queue_timeout,
                self.permits.clone().acquire_owned(),
            )
            .await
            {
                Ok(Ok(p)) => Ok(self.admitted(p)),
                _ => Err(ApiError::overloaded(
                    "the server is at capacity (queue wait timed out); retry shortly",
                )),
            }
        };
        self.metrics.queued.fetch_sub(1, Ordering::Relaxed);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn beyond_running_and_waiting_a_request_is_turned_away() {
        let metrics = Arc::new(Metrics::default());
        let a = Arc::new(Admission::new(
            AdmissionLimits {
                max_in_flight: 1,
                max_queued: 1,
                queue_timeout: Duration::from_millis(200),
            },
            metrics.clone(),
        ));
        let first = a.enter().await.unwrap();
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.enter().await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let third = a.enter().await;
        assert_eq!(third.err().unwrap().retry_after, Some(1));
        drop(first);
        assert!(waiter.await.unwrap(), "the queued request got in");
        assert_eq!(metrics.queued.load(Ordering::Relaxed), 0);
        assert_eq!(metrics.in_flight.load(Ordering::Relaxed), 0);
    }
}
