//! `harness simulate --sweep`.

use std::path::Path;

pub fn main(
    _plan: &Path,
    _policies: &[String],
    _seed: Option<u64>,
    _out: Option<&Path>,
    _sweep: &str,
    _quiet: bool,
) -> u8 {
    crate::cli::EXIT_INVALID
}
