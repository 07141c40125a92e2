//! What a mode runs of the MoL loop besides the expert decision: whether closed tasks get a
//! summary hop, whether views are kept within the window, which expert a frontend is told
//! about, the system head, and whether a server's conversation id is kept.
//!
//! Only `mol` builds per-expert views; `proxy` and `single` send the whole history to one
//! model name, and the server (or the model) does the rest.

use crate::mol::profile::Profile;
use crate::mol::timeline::with_identity;
use crate::protocol::{ChatMessage, Expert, Mode};

/// Whether a closed task gets a summary hop, and a view waits for the summaries it shows:
/// summaries are how one expert's view learns of another's tasks.
pub fn summarizes(mode: Mode) -> bool {
    mode.routes_client_side()
}

/// Whether an expert's view is kept within its window (old outputs shrink, older steps are
/// compacted): the compaction request names an adapter, so only where experts are adapters.
pub fn fits_views(mode: Mode) -> bool {
    mode.routes_client_side()
}

/// The expert a frontend is told about: experts are a client-side notion only in `mol` mode
/// (elsewhere the task owner is an internal label).
pub fn shown_expert(mode: Mode, expert: Option<Expert>) -> Option<Expert> {
    expert.filter(|_| mode.routes_client_side())
}

/// Whether the conversation id a server sends back is kept (and sent on later requests): a
/// routing server ties the turns of one conversation together by it.
pub fn keeps_conversation_id(mode: Mode) -> bool {
    mode == Mode::Proxy
}

/// The system head of answer and summary requests: `head`, with the profile's identity prompt
/// appended in `mol` mode, where the answering model is the profile's.
pub fn system_head(mode: Mode, profile: &Profile, head: &[ChatMessage]) -> Vec<ChatMessage> {
    if mode.routes_client_side() {
        with_identity(head, &profile.intro)
    } else {
        head.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mol::profile::ProfileNames;

    #[test]
    fn only_mol_runs_the_client_side_loop() {
        assert!(summarizes(Mode::Mol) && fits_views(Mode::Mol));
        for mode in [Mode::Proxy, Mode::Single] {
            assert!(!summarizes(mode) && !fits_views(mode), "{mode:?}");
            assert_eq!(shown_expert(mode, Some(Expert::L1)), None);
        }
        assert_eq!(shown_expert(Mode::Mol, Some(Expert::L1)), Some(Expert::L1));
        assert!(keeps_conversation_id(Mode::Proxy));
        assert!(!keeps_conversation_id(Mode::Mol) && !keeps_conversation_id(Mode::Single));
    }

    #[test]
    fn the_identity_prompt_joins_the_head_only_in_mol_mode() {
        let profile = Profile::builtin(&ProfileNames::default());
        let head = [ChatMessage::system("You are baton.")];
        let mol = system_head(Mode::Mol, &profile, &head);
        assert_eq!(mol.len(), 1);
        assert!(mol[0].content.starts_with("You are baton.\n\n"));
        assert!(mol[0].content.contains(profile.intro.trim()));
        for mode in [Mode::Proxy, Mode::Single] {
            assert_eq!(system_head(mode, &profile, &head), head.to_vec());
        }
    }
}
