//! Escape tests for approval bypasses: commands and tool calls that run code without the user's consent.
