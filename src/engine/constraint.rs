//! Constrained choice among a fixed set of token sequences (the route labels): a token trie.
//! Where the trie has one way forward the token is forced (appended without sampling); where it
//! branches, the choice comes from the one forward pass that gives that position's logits.

use super::error::EngineError;

#[derive(Debug, Clone, Default)]
struct Node {
    children: Vec<(u32, usize)>,
    /// The option that ends here.
    option: Option<usize>,
}

/// A prefix-free set of allowed token sequences, as a trie.
#[derive(Debug, Clone)]
pub struct TokenTrie {
    nodes: Vec<Node>,
    options: Vec<Vec<u32>>,
}

/// Where a walk through the trie stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrieState(usize);

impl TokenTrie {
    /// Builds the trie. Options must be non-empty, distinct, and none a prefix of another
    /// (otherwise "stop here or go on" would need an end token the labels don't have).
    pub fn new(options: &[Vec<u32>]) -> Result<TokenTrie, EngineError> {
        if options.is_empty() {
            return Err(EngineError::Request("constraint has no options".into()));
        }
        let mut nodes = vec![Node::default()];
        for (index, option) in options.iter().enumerate() {
            if option.is_empty() {
                return Err(EngineError::Request(format!(
                    "constraint option {index} is empty"
                )));
            }
            let mut at = 0;
            for &token in option {
                if let Some(other) = nodes[at].option {
                    return Err(EngineError::Request(format!(
                        "constraint option {other} is a prefix of option {index}; options must be prefix-free"
                    )));
                }
                at = match nodes[at].children.iter().find(|(t, _)| *t == token) {
                    Some((_, child)) => *child,
                    None => {
                        nodes.push(Node::default());
                        let child = nodes.len() - 1;
                        nodes[at].children.push((token, child));
                        child
                    }
                };
            }
            if let Some(other) = nodes[at].option {
                return Err(EngineError::Request(format!(
                    "constraint options {other} and {index} are the same tokens"
                )));
            }
            if !nodes[at].children.is_empty() {
                return Err(EngineError::Request(format!(
                    "constraint option {index} is a prefix of another option; options must be prefix-free"
                )));
            }
            nodes[at].option = Some(index);
        }
        Ok(TokenTrie {
            nodes,
            options: options.to_vec(),
        })
    }

    pub fn root(&self) -> TrieState {
        TrieState(0)
    }

    pub fn options(&self) -> &[Vec<u32>] {
        &self.options
    }

    /// The tokens allowed next.
    pub fn allowed(&self, state: TrieState) -> impl Iterator<Item = u32> + '_ {
        self.nodes[state.0].children.iter().map(|(t, _)| *t)
    }

    /// The single token allowed next, when there is exactly one.
    pub fn forced(&self, state: TrieState) -> Option<u32> {
        match self.nodes[state.0].children.as_slice() {
            [(t, _)] => Some(*t),
            _ => None,
        }
    }

    /// Moves along `token`; None when it is not allowed.
    pub fn advance(&self, state: TrieState, token: u32) -> Option<TrieState> {
        self.nodes[state.0]
            .children
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, child)| TrieState(*child))
    }

    /// The option completed at `state`, if any.
    pub fn finished(&self, state: TrieState) -> Option<usize> {
        self.nodes[state.0].option
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefix_is_forced_then_branches() {
        let trie = TokenTrie::new(&[vec![43, 15], vec![43, 16], vec![43, 17], vec![43, 18]])
            .expect("trie");
        let root = trie.root();
        assert_eq!(trie.forced(root), Some(43));
        let s = trie.advance(root, 43).expect("L");
        assert_eq!(trie.forced(s), None);
        assert_eq!(trie.allowed(s).collect::<Vec<_>>(), vec![15, 16, 17, 18]);
        assert!(trie.advance(s, 99).is_none());
        let end = trie.advance(s, 17).expect("2");
        assert_eq!(trie.finished(end), Some(2));
    }

    #[test]
    fn rejects_prefixes_duplicates_and_empties() {
        assert!(TokenTrie::new(&[vec![1], vec![1, 2]]).is_err());
        assert!(TokenTrie::new(&[vec![1, 2], vec![1]]).is_err());
        assert!(TokenTrie::new(&[vec![1, 2], vec![1, 2]]).is_err());
        assert!(TokenTrie::new(&[vec![]]).is_err());
        assert!(TokenTrie::new(&[]).is_err());
    }
}
