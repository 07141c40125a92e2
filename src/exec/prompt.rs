//! The `--exec` prompt: from argv, or from piped stdin (`-` or no prompt). Never reads a terminal.

use std::io::{IsTerminal, Read};

pub fn read(arg: Option<&str>) -> Result<String, String> {
    let text = match arg {
        Some(p) if p != "-" => p.to_string(),
        _ => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(
                    "--exec needs a prompt: pass it as an argument, or pipe it on stdin \
                     (e.g. `echo \"…\" | baton --exec -`)"
                        .into(),
                );
            }
            let mut buf = String::new();
            stdin
                .lock()
                .read_to_string(&mut buf)
                .map_err(|e| format!("cannot read the prompt from stdin: {e}"))?;
            buf
        }
    };
    if text.trim().is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(text)
}
