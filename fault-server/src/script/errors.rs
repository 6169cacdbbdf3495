//! Why a script was refused: a parse error located by line and column, or a cross-field
//! rule that names the phase and the field.

use thiserror::Error;

/// Why a script was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScriptError {
    /// The text is not valid YAML for a script (a syntax error, an unknown key, a value
    /// out of range). The message carries the YAML path and `at line L column C`.
    #[error("{message}")]
    Parse {
        /// serde_yaml's message, with its location.
        message: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
    },
    /// The fields are each valid but do not fit together.
    #[error("{phase}: `{field}` {message}")]
    Invalid {
        /// The phase, as `faults[INDEX] "NAME"`, or `server`.
        phase: String,
        /// The field, e.g. `until` or `respond[1].retry_after`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl ScriptError {
    pub(super) fn invalid(
        phase: &str,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ScriptError {
        ScriptError::Invalid {
            phase: phase.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }
}
