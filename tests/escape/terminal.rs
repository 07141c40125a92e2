//! Escape tests for escape sequences that model- or command-controlled text tries to send to the user's terminal.
