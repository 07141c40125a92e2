//! A client's request read: its system head, the history it brings, and the new tail.

use sha2::{Digest, Sha256};

use crate::protocol::{ChatMessage, Role, TurnError};

/// The digest of a client history: roles, trimmed texts, tool call ids and names, tool result
/// ids. Reasoning is left out (clients drop it), and so are the exact argument bytes.
pub(super) fn digest(messages: &[ChatMessage]) -> String {
    let mut h = Sha256::new();
    for m in messages {
        let role = match m.role {
            Role::System => "s",
            Role::User => "u",
            Role::Assistant => "a",
            Role::Tool => "t",
        };
        h.update(role.as_bytes());
        h.update([0]);
        h.update(m.content.trim().as_bytes());
        h.update([0]);
        for c in &m.tool_calls {
            h.update(c.id.as_bytes());
            h.update([1]);
            h.update(c.name.as_bytes());
            h.update([1]);
        }
        if let Some(id) = &m.tool_call_id {
            h.update(id.as_bytes());
        }
        h.update([2]);
    }
    let out = h.finalize();
    out.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// A request's messages, split: the leading system messages, the earlier history, and the new
/// tail (the last user message, or the trailing tool results).
pub(super) struct Split {
    pub(super) head: Vec<ChatMessage>,
    pub(super) earlier: Vec<ChatMessage>,
    pub(super) tail: Tail,
    /// Everything after the head, tail included (for the digest after the answer).
    pub(super) after_head: Vec<ChatMessage>,
}

pub(super) enum Tail {
    User(String),
    ToolResults(Vec<ChatMessage>),
}

pub(super) fn split(messages: &[ChatMessage]) -> Result<Split, TurnError> {
    let head_len = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let (head, rest) = messages.split_at(head_len);
    let Some(last) = rest.last() else {
        return Err(TurnError::bad_request(
            "invalid_messages",
            "messages must hold a user message or tool results after the system messages",
        ));
    };
    let (tail, tail_len) = match last.role {
        Role::User => (Tail::User(last.content.clone()), 1),
        Role::Tool => {
            let n = rest
                .iter()
                .rev()
                .take_while(|m| m.role == Role::Tool)
                .count();
            (Tail::ToolResults(rest[rest.len() - n..].to_vec()), n)
        }
        Role::Assistant | Role::System => {
            return Err(TurnError::bad_request(
                "invalid_messages",
                "the last message must be a user message or tool results",
            ));
        }
    };
    Ok(Split {
        head: head.to_vec(),
        earlier: rest[..rest.len() - tail_len].to_vec(),
        tail,
        after_head: rest.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_split_into_head_history_and_tail() {
        let msgs = vec![
            ChatMessage::system("s"),
            ChatMessage::user("a"),
            ChatMessage::assistant("b"),
            ChatMessage::user("c"),
        ];
        let s = split(&msgs).unwrap();
        assert_eq!(s.head.len(), 1);
        assert_eq!(s.earlier.len(), 2);
        assert!(matches!(s.tail, Tail::User(ref t) if t == "c"));
        let mut tools = msgs.clone();
        tools.push(ChatMessage::tool_result("1", "x"));
        tools.push(ChatMessage::tool_result("2", "y"));
        let s = split(&tools).unwrap();
        assert!(matches!(s.tail, Tail::ToolResults(ref r) if r.len() == 2));
        assert_eq!(s.earlier.len(), 3);
        assert!(split(&[ChatMessage::system("s")]).is_err());
        assert_eq!(
            split(&[ChatMessage::assistant("x")]).err().unwrap().code,
            "invalid_messages"
        );
    }

    #[test]
    fn the_digest_ignores_reasoning_and_whitespace_but_not_text() {
        let mut a = ChatMessage::assistant("hi ");
        a.reasoning = Some("thinking".into());
        let b = ChatMessage::assistant("hi");
        assert_eq!(digest(&[a]), digest(std::slice::from_ref(&b)));
        assert_ne!(digest(&[b]), digest(&[ChatMessage::assistant("ho")]));
        assert_ne!(
            digest(&[ChatMessage::user("x")]),
            digest(&[ChatMessage::assistant("x")])
        );
    }
}
