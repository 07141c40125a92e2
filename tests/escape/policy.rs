//! Escape tests for policy written by the sandboxed side: project config, trust.
