//! `harness compare BASELINE REPORT_OR_BASELINE`: a run against a saved baseline, offline;
//! exit 1 on a regression beyond the baseline's tolerance.

use std::path::Path;

use super::{EXIT_GATE_FAILED, EXIT_INVALID, EXIT_PASS, say_regressions};
use crate::{baseline, report};

pub(super) fn compare(baseline: &Path, now: &Path, short: bool) -> u8 {
    let read = |path: &Path| {
        baseline::read(path).map_err(|e| {
            eprintln!("error: {e}");
            EXIT_INVALID
        })
    };
    let (base, current) = match (read(baseline), read(now)) {
        (Ok(b), Ok(n)) => (b, n),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    let comparison = baseline::compare(
        &base,
        &baseline.display().to_string(),
        &current.policies,
        &current.plan,
        &base.tolerance,
    );
    if short {
        let ok = comparison
            .rows
            .iter()
            .filter(|r| r.verdict == report::Drift::Ok)
            .count();
        let mut shown = comparison.clone();
        shown.rows.retain(|r| r.verdict != report::Drift::Ok);
        if !shown.rows.is_empty() {
            print!("{}", report::baseline_table(&shown));
        }
        println!("{ok} of {} figures within tolerance", comparison.rows.len());
    } else {
        print!("{}", report::baseline_table(&comparison));
    }
    say_regressions(&comparison);
    if comparison.passed() {
        println!("PASS: no regression against {}", baseline.display());
        EXIT_PASS
    } else {
        println!("FAIL: regressions against {}", baseline.display());
        EXIT_GATE_FAILED
    }
}
