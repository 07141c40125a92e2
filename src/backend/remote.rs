//! The OpenAI-compatible remote backend: Chat Completions over HTTP with SSE streaming.
