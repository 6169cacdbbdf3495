//! The progress bars of a run in a terminal: one per policy, drawn in full when it ends.

use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

use crate::plan::{NamedPolicy, Plan};
use crate::run::ProgressFactory;

pub(super) fn progress_bars() -> ProgressFactory {
    Arc::new(|policy: &NamedPolicy, plan: &Plan| {
        let total = (plan.duration + plan.drain).as_secs();
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>16} [{bar:30}] {pos:>3}/{len}s {msg}")
                .expect("a constant template")
                .progress_chars("=> "),
        );
        bar.set_prefix(policy.name.clone());
        let bar = FinishOnDrop(bar);
        Arc::new(move |second: u64, r: &crate::stats::Recorder| {
            let bar = &bar.0;
            bar.set_position(second.min(total));
            bar.set_message(format!(
                "{} offered, {} attempts, {:.1}% ok, {} dropped",
                r.offered(),
                r.attempts,
                r.succeeded as f64 * 100.0 / r.offered().max(1) as f64,
                r.dropped
            ));
        })
    })
}

/// Leaves a policy's bar drawn in full when its run ends.
struct FinishOnDrop(ProgressBar);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.0.finish();
    }
}
