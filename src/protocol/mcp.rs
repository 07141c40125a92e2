//! The MCP servers an editor hands to a session (ACP `mcpServers` of `session/new` and
//! `session/load`), in a form of baton's own: the ACP frontend parses them, the builder is
//! given them in `Config::client_mcp_servers`.

use serde::{Deserialize, Serialize};

/// One MCP server the client asked the session to use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum McpServerSpec {
    /// A program to start, speaking MCP on its stdin and stdout.
    Stdio {
        name: String,
        command: std::path::PathBuf,
        args: Vec<String>,
        /// Variables set for the program, in the order given.
        env: Vec<(String, String)>,
    },
    /// Streamable HTTP.
    Http {
        name: String,
        url: String,
        headers: Vec<(String, String)>,
    },
    /// The older HTTP + server-sent events transport.
    Sse {
        name: String,
        url: String,
        headers: Vec<(String, String)>,
    },
}

impl McpServerSpec {
    pub fn name(&self) -> &str {
        match self {
            McpServerSpec::Stdio { name, .. }
            | McpServerSpec::Http { name, .. }
            | McpServerSpec::Sse { name, .. } => name,
        }
    }
}
