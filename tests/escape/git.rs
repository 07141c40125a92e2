//! Escape tests for git as a code-execution path: config, hooks, commondir, submodule gitdirs, gitlinks and hooksPath written by a sandboxed command, and `.baton/` policy files.
