//! The MCP servers an editor hands to a session (ACP `mcpServers` of `session/new` and
//! `session/load`), in a form of baton's own: the ACP frontend parses them and `config::mcp`
//! turns them into servers the MCP client starts with the session.

use serde::{Deserialize, Serialize};

/// One MCP server the client asked the session to use.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// Names only: environment values and headers carry tokens, and a `{:?}` of a configuration
/// must not print them.
impl std::fmt::Debug for McpServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |pairs: &[(String, String)]| -> Vec<String> {
            pairs.iter().map(|(k, _)| format!("{k}=…")).collect()
        };
        match self {
            McpServerSpec::Stdio {
                name,
                command,
                args,
                env,
            } => f
                .debug_struct("Stdio")
                .field("name", name)
                .field("command", command)
                .field("args", args)
                .field("env", &names(env))
                .finish(),
            McpServerSpec::Http { name, url, headers }
            | McpServerSpec::Sse { name, url, headers } => f
                .debug_struct(if matches!(self, McpServerSpec::Http { .. }) {
                    "Http"
                } else {
                    "Sse"
                })
                .field("name", name)
                .field("url", url)
                .field("headers", &names(headers))
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_names_variables_and_headers_without_their_values() {
        let stdio = McpServerSpec::Stdio {
            name: "fs".into(),
            command: "/bin/mcp".into(),
            args: vec![],
            env: vec![("TOKEN".into(), "sk-secret-1".into())],
        };
        let http = McpServerSpec::Http {
            name: "web".into(),
            url: "https://example.test".into(),
            headers: vec![("Authorization".into(), "Bearer sk-secret-2".into())],
        };
        let shown = format!("{stdio:?} {http:?}");
        assert!(
            shown.contains("TOKEN=…") && shown.contains("Authorization=…"),
            "{shown}"
        );
        assert!(!shown.contains("sk-secret"), "{shown}");
    }
}
