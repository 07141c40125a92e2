//! Escape tests for file tools: races, special files and huge files.
