//! Escape tests for evaluation trials: capabilities, mounts, network, secrets and the host files a task-controlled trial can reach.
