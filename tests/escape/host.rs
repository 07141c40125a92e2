//! Escape tests for the sandboxed command against the host: terminal, sockets, capabilities, processes, secrets, git, trials.
