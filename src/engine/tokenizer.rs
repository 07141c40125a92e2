//! Text ↔ token ids: the model's tokenizer.json through the `tokenizers` crate, and a streaming
//! detokenizer that only ever hands out complete UTF-8 characters.
//!
//! ```no_run
//! # use baton::engine::tokenizer::Tokenizer;
//! let tok = Tokenizer::from_file(std::path::Path::new("ROOT/base/tokenizer.json")).unwrap();
//! let ids = tok.encode("hello world").unwrap();
//! let mut detok = tok.detokenizer();
//! let mut text = String::new();
//! for id in ids {
//!     text += &detok.push(id).unwrap();
//! }
//! text += &detok.finish().unwrap();
//! assert_eq!(text, "hello world");
//! ```

use std::path::{Path, PathBuf};

/// A tokenizer failure; names the tokenizer file and what went wrong.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("cannot load tokenizer {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("tokenizer {path}: cannot encode text: {message}")]
    Encode { path: PathBuf, message: String },
    #[error("tokenizer {path}: cannot decode token ids: {message}")]
    Decode { path: PathBuf, message: String },
}

/// The model's tokenizer. Encoding never adds BOS/EOS (chat templates write their own special
/// tokens), and special tokens written in the text (`<|im_start|>`) become their single ids.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl Tokenizer {
    /// Loads a tokenizer.json (HF `tokenizers` format).
    pub fn from_file(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let bytes = std::fs::read(path).map_err(|e| TokenizerError::Load {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let inner =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| TokenizerError::Load {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        Ok(Tokenizer {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// The file this tokenizer was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Token ids of `text`, as HF's `tokenizer.encode(text, add_special_tokens=False)`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids`, special tokens included (as HF's `tokenizer.decode(ids)`). Bytes that do
    /// not form valid UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| TokenizerError::Decode {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }

    /// The id of a token written exactly as in the vocabulary (`"<|im_end|>"`), if any.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary entry of `id`, if any.
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Number of token ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// A streaming decoder for one generated sequence.
    pub fn detokenizer(&self) -> Detokenizer<'_> {
        Detokenizer::new(self)
    }
}

/// Turns generated ids into text as they arrive. A token that ends in the middle of a UTF-8
/// character (byte-level BPE splits emoji and CJK into single bytes) yields nothing until the
/// character is complete, so every piece handed out is whole text.
///
/// It decodes a short window of recent ids rather than single ids, because a decoder may
/// render an id differently depending on its neighbours (byte fallback, leading-space rules).
pub struct Detokenizer<'t> {
    tokenizer: &'t Tokenizer,
    ids: Vec<u32>,
    /// Start of the window decoded for comparison (text before it is already out).
    prefix_offset: usize,
    /// End of the ids whose text is already out.
    read_offset: usize,
}

impl<'t> Detokenizer<'t> {
    fn new(tokenizer: &'t Tokenizer) -> Self {
        Detokenizer {
            tokenizer,
            ids: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
        }
    }

    /// Adds one generated id; returns the text that became complete (often empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.ids.push(id);
        let settled = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let current = self.tokenizer.decode(&self.ids[self.prefix_offset..])?;
        if current.len() <= settled.len() || current.ends_with(char::REPLACEMENT_CHARACTER) {
            // Either nothing new, or the last character is still incomplete.
            return Ok(String::new());
        }
        let piece = text_after(&settled, &current);
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(piece)
    }

    /// Ends the sequence: returns whatever is still held back (an incomplete character at the
    /// very end comes out as U+FFFD, exactly as a full decode would show it).
    pub fn finish(&mut self) -> Result<String, TokenizerError> {
        if self.read_offset == self.ids.len() {
            return Ok(String::new());
        }
        let settled = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let current = self.tokenizer.decode(&self.ids[self.prefix_offset..])?;
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(text_after(&settled, &current))
    }

    /// All ids pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

/// The part of `current` that follows `settled`. Normally `settled` is a prefix; when the window
/// decodes differently with the new id, fall back to the byte count, moved to a character
/// boundary so the piece is still valid text.
fn text_after(settled: &str, current: &str) -> String {
    if let Some(rest) = current.strip_prefix(settled) {
        return rest.to_string();
    }
    let mut cut = settled.len().min(current.len());
    while !current.is_char_boundary(cut) {
        cut += 1;
    }
    current[cut..].to_string()
}
