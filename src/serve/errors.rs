//! OpenAI error envelopes: `{"error": {message, type, code, param}}` with the status a client
//! library maps to its exception classes.

use crate::protocol::stdio::eprintln;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::protocol::{ErrorKind, TurnError, TurnErrorKind};

/// One error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: String,
    pub message: String,
    pub param: Option<String>,
    /// Seconds for `Retry-After` (503 overloaded).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_string(),
            message: message.into(),
            param: None,
            retry_after: None,
        }
    }

    pub fn bad_request(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    pub fn overloaded(message: impl Into<String>) -> Self {
        ApiError {
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message)
        }
    }

    /// The OpenAI `type` of the error, from its status.
    fn error_type(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            400 | 408 | 409 | 413 | 422 => "invalid_request_error",
            429 => "rate_limit_error",
            _ => "server_error",
        }
    }

    /// The body, also used as the error frame of a stream.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.error_type(),
                "code": self.code,
                "param": self.param,
            }
        })
    }
}

impl From<TurnError> for ApiError {
    fn from(e: TurnError) -> Self {
        if let Some(detail) = &e.detail {
            // The operator's log gets what the client is not told.
            eprintln!(
                "baton serve: {}: {}",
                e.code,
                crate::protocol::terminal_safe_line(detail)
            );
        }
        let status = match e.kind {
            TurnErrorKind::BadRequest | TurnErrorKind::ContextOverflow => StatusCode::BAD_REQUEST,
            TurnErrorKind::NotFound => StatusCode::NOT_FOUND,
            TurnErrorKind::Busy => StatusCode::SERVICE_UNAVAILABLE,
            TurnErrorKind::Upstream(ErrorKind::Timeout) => StatusCode::GATEWAY_TIMEOUT,
            TurnErrorKind::Upstream(_) => StatusCode::BAD_GATEWAY,
        };
        ApiError {
            retry_after: (status == StatusCode::SERVICE_UNAVAILABLE).then_some(1),
            ..ApiError::new(status, &e.code, e.message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
