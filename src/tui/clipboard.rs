//! Copy to the system clipboard with OSC 52 (works over SSH and in tmux with `set-clipboard on`).

use std::io::Write;

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The escape sequence. Inside tmux it is sent twice: plain, which tmux takes into its paste
/// buffer and forwards to the outer terminal with `set -g set-clipboard on` (tmux 3.3 drops
/// the passthrough form unless `allow-passthrough on`), then wrapped in a DCS passthrough for
/// setups that allow passthrough but not set-clipboard. Both carry the same text.
pub fn osc52_sequence(text: &str, in_tmux: bool) -> String {
    let seq = format!("\x1b]52;c;{}\x07", base64(text.as_bytes()));
    if in_tmux {
        format!("{seq}\x1bPtmux;\x1b{seq}\x1b\\")
    } else {
        seq
    }
}

/// Writes the OSC 52 sequence to the terminal. The terminal may ignore it silently; the caller
/// says so to the user, with the alternatives.
pub fn copy_osc52(text: &str) -> std::io::Result<()> {
    let seq = osc52_sequence(text, std::env::var_os("TMUX").is_some());
    let mut out = std::io::stdout();
    out.write_all(seq.as_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(osc52_sequence("hi", false), "\x1b]52;c;aGk=\x07");
        assert_eq!(
            osc52_sequence("hi", true),
            "\x1b]52;c;aGk=\x07\x1bPtmux;\x1b\x1b]52;c;aGk=\x07\x1b\\"
        );
    }
}
