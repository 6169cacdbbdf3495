//! The fault script, as pure logic: a request's facts and the time go in, a decision
//! comes out.
//!
//! Why pure (str0m's `netem` is the model): a decision is a function of its arguments
//! alone, so it is tested in tables without a socket, and whoever calls
//! [`Script::select`] with the same seed, request and time gets the decision the live
//! server makes. Nothing here touches tokio, axum, a socket or a clock: `now` is an
//! argument (time since the run started) and randomness comes from the caller's RNG.
//!
//! Selection, for each request: walk the phases in order; a phase applies when `now` is
//! in its half-open window `[from, until)`, the request matches its `match`, its attempt
//! number is listed in `attempts` (when given), and a draw falls under its
//! `probability`; the first phase that applies picks one `respond` entry by weight.
//! No phase applies: [`Decision::Serve`].
//!
//! The script's random draws are defined here: one uniform per phase that matches the
//! request and whose probability is strictly between 0 and 1, one to pick among several
//! weighted entries, and those of a delay distribution (a sticky phase makes its draws
//! from a stream of its own, seeded by [`RequestFacts::sticky_seed`]). The live server
//! seeds one [`rand_chacha::ChaCha8Rng`] per request from [`crate::wire::attempt_seed`]
//! (seed, `x-request-id`, attempt, the chain of attempts above), so the decision for a request with an id does not
//! depend on which other requests happened to arrive before it, and then draws the
//! request's service time from the same generator.

mod errors;
mod facts;
mod fault;
mod pattern;
mod resolve;
mod schema;
mod select;
pub mod spec;
mod values;

use std::time::Duration;

use crate::capacity::CapacityLimits;
pub use errors::ScriptError;
pub use facts::{HeaderLookup, NoHeaders, RequestFacts};
pub use fault::{Decision, Fault, FaultAction, FaultKind, FaultResponse, GrpcStatus, Pushback};
use resolve::Phase;
pub use spec::{
    AttemptNumber, CapacitySpec, FRAMING_HEADERS, GrpcCodeSpec, HeaderNameSpec, MatchSpec,
    MethodSpec, OneOrMany, PathSpec, PeerNumber, PhaseSpec, Probability, PushbackSpec, RespondSpec,
    ResponseHeaderName, ScriptSpec, StatusCodeSpec, Weight, listed_names,
};

/// The largest script accepted, in bytes: the harness's limit on a plan file
/// (`MAX_PLAN_BYTES`), since a whole plan is a valid script. Real scripts take a few
/// kilobytes.
pub const MAX_SCRIPT_BYTES: usize = 1024 * 1024;

/// A validated, resolved script: the fault phases and the capacity model.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    phases: Vec<Phase>,
    capacity: Option<CapacityLimits>,
    seed: Option<u64>,
    spec: ScriptSpec,
}

impl Default for Script {
    fn default() -> Self {
        Script::empty()
    }
}

impl Script {
    /// No faults, unlimited capacity.
    pub fn empty() -> Script {
        Script {
            phases: Vec::new(),
            capacity: None,
            seed: None,
            spec: ScriptSpec::default(),
        }
    }

    /// Parses a standalone script or a whole plan (YAML; JSON is YAML too). Reads the
    /// top-level `faults:`, `server:` and `seed:`; other top-level keys are ignored, so a
    /// harness plan works as a script. An empty document is the empty script.
    ///
    /// Before the parser sees it, a text larger than [`MAX_SCRIPT_BYTES`] or nested
    /// deeper than [`crate::yaml_guard::MAX_DEPTH`] is refused (both checks are linear;
    /// the parser's cost grows with the square of the depth).
    pub fn from_yaml_str(text: &str) -> Result<Script, ScriptError> {
        if text.len() > MAX_SCRIPT_BYTES {
            return Err(ScriptError::Parse {
                message: format!(
                    "the script is {} bytes long (at most {MAX_SCRIPT_BYTES} are accepted)",
                    text.len()
                ),
                line: None,
                column: None,
            });
        }
        if text.trim().is_empty() {
            return Ok(Script::empty());
        }
        crate::yaml_guard::check_depth(text, crate::yaml_guard::MAX_DEPTH).map_err(|deep| {
            ScriptError::Parse {
                message: format!(
                    "nested {} levels deep at line {} column {} (at most {} are accepted)",
                    deep.depth, deep.line, deep.column, deep.max
                ),
                line: Some(deep.line),
                column: Some(deep.column),
            }
        })?;
        let spec: ScriptSpec = serde_yaml::from_str(text).map_err(|error| {
            let location = error.location();
            ScriptError::Parse {
                message: error.to_string(),
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
            }
        })?;
        Script::from_spec(spec)
    }

    /// The capacity model, when the script has a `server:` block.
    pub fn capacity(&self) -> Option<&CapacityLimits> {
        self.capacity.as_ref()
    }

    /// The script's own `seed:`, if it has one.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// The script as parsed (for echoing it back, e.g. `GET /__chaos/script`).
    pub fn spec(&self) -> &ScriptSpec {
        &self.spec
    }

    /// Number of fault phases.
    pub fn phase_count(&self) -> usize {
        self.phases.len()
    }

    /// The name of phase `index`: its `name`, or `faults[INDEX]`.
    pub fn phase_name(&self, index: usize) -> Option<&str> {
        self.phases.get(index).map(|p| p.label.as_str())
    }

    /// True when the script has no phase and no capacity model.
    pub fn is_empty(&self) -> bool {
        self.phases.is_empty() && self.capacity.is_none()
    }

    /// The end of the last windowed phase (the largest `until`), for measuring recovery;
    /// `None` when no phase has an `until`.
    pub fn last_fault_end(&self) -> Option<Duration> {
        self.phases.iter().filter_map(|p| p.until).max()
    }
}

#[cfg(test)]
mod tests;
