//! Scripts installed over the control API since the last reset: what a run reads to know
//! that the faults it met were the ones it installed.
//!
//! Why the ledger keeps them: a run installs its script and then resets, so any change
//! the ledger holds came from someone else while the run was going (a second CI job
//! sharing the server, a person with curl). Its figures then belong partly to that
//! script, and a policy judged on them would be blamed for faults it never agreed to.

use serde::{Deserialize, Serialize};

/// The most changes kept between two resets; later ones are counted, not kept.
pub const MAX_KEPT: usize = 16;

/// One script installed over the control API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScriptChange {
    /// On the run clock of the script it replaced, in milliseconds.
    pub at_ms: u64,
    /// Who installed it (`harness`, `control`).
    pub origin: String,
    /// The new script, in a few words (its phases, its capacity).
    pub now: String,
    /// The one it replaced, in the same words.
    pub was: String,
}

/// The changes since the last reset, bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Changes {
    pub(super) kept: Vec<ScriptChange>,
    pub(super) dropped: u64,
}

impl Changes {
    pub(super) fn note(&mut self, change: ScriptChange) {
        if self.kept.len() < MAX_KEPT {
            self.kept.push(change);
        } else {
            self.dropped += 1;
        }
    }
}

/// Why a run's figures are not its own, when a script was installed during it: the
/// first change, and how many there were, in one sentence.
pub fn foreign(kept: &[ScriptChange], dropped: u64) -> Option<String> {
    let first = kept.first()?;
    let total = kept.len() as u64 + dropped;
    let more = match total {
        1 => String::new(),
        n => format!(" (and {} more change(s) after it)", n - 1),
    };
    Some(format!(
        "the fault-server's script was replaced during the run by someone else (a `PUT /__chaos/script` marked `{}`, {:.1} s into the run): {}, in place of {}{more}; the figures are partly that script's, so they are not judged as the policy's: run again with the server to yourself",
        first.origin,
        first.at_ms as f64 / 1000.0,
        first.now,
        first.was,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(at_ms: u64) -> ScriptChange {
        ScriptChange {
            at_ms,
            origin: "control".into(),
            now: "1 fault phase(s) (brownout)".into(),
            was: "no fault phases".into(),
        }
    }

    #[test]
    fn no_change_is_nothing_to_say() {
        assert_eq!(foreign(&[], 0), None);
    }

    #[test]
    fn the_first_change_is_named_and_the_rest_counted() {
        let mut changes = Changes::default();
        for k in 0..(MAX_KEPT as u64 + 3) {
            changes.note(change(1200 + k));
        }
        assert_eq!(changes.kept.len(), MAX_KEPT);
        assert_eq!(changes.dropped, 3);
        let said = foreign(&changes.kept, changes.dropped).expect("changes were noted");
        assert!(said.contains("1.2 s into the run"), "{said}");
        assert!(said.contains("(brownout)"), "{said}");
        assert!(said.contains("and 18 more"), "{said}");
    }
}
