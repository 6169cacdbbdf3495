//! `harness simulate PLAN --sweep KEY=V1,V2,...`: the sweep run, said and written.
//!
//! The comparison is written after each value, so an interrupted sweep (Ctrl-C, SIGTERM,
//! SIGHUP) keeps the values that ran, marked partial, and exits 130. Otherwise: exit 0
//! when every value ran (a sweep explores: a value whose gates fail is a finding, shown
//! in the table), 2 when the sweep or a value makes no plan, 3 when the results could not
//! be written where asked: they went to a temporary directory, named on stderr, or
//! nowhere.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use super::{EXIT_CANNOT_RUN, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_PASS};
use crate::report::{self, WriteError};
use crate::simulate::sweep::{self, Step, Swept};

pub(super) fn sweep(
    path: &Path,
    policies: &[String],
    seed: Option<u64>,
    out: Option<&Path>,
    spec: &str,
    quiet: bool,
    abort: &CancellationToken,
) -> u8 {
    let (stamp, _) = report::timestamp(SystemTime::now());
    let mut place = Place {
        out,
        stamp,
        written: None,
        misplaced: false,
    };
    let result = sweep::run(
        path,
        policies,
        seed,
        spec,
        abort,
        |step: Step<'_>, swept| {
            // Written before it is said: a value's line means it is on disk.
            place.write(swept);
            if !quiet {
                eprintln!("{} = {}: {}", step.key, step.value, step.effort.describe());
            }
        },
    );
    let swept = match result {
        Ok(swept) => swept,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_INVALID;
        }
    };
    if swept.runs.is_empty() {
        eprintln!("interrupted before a value ran: nothing was written");
        return EXIT_INTERRUPTED;
    }
    if !quiet {
        print!("{}", sweep::markdown(&swept.table));
    }
    match &place.written {
        Some(Ok(dir)) => {
            if place.misplaced {
                eprintln!("  the sweep was written to {} instead", dir.display());
            }
            println!(
                "sweep of {}: {}",
                swept.table.key,
                dir.join("sweep.html").display()
            );
        }
        Some(Err(e)) => eprintln!("error: {e}: the sweep could not be written anywhere"),
        None => {}
    }
    if swept.table.partial {
        eprintln!(
            "interrupted: {} of {} values ran; the comparison holds them, marked partial",
            swept.table.ran,
            swept.table.values.len()
        );
        EXIT_INTERRUPTED
    } else if place.misplaced || !matches!(place.written, Some(Ok(_))) {
        EXIT_CANNOT_RUN
    } else {
        EXIT_PASS
    }
}

/// Where the sweep goes as it is written, value by value.
struct Place<'a> {
    out: Option<&'a Path>,
    stamp: String,
    /// Where it went (or why it could go nowhere), once something was written.
    written: Option<Result<PathBuf, WriteError>>,
    /// It could not go where it was asked and went to a temporary directory.
    misplaced: bool,
}

impl Place<'_> {
    /// Writes the sweep so far: all of it the first time, then the newest value and the
    /// comparison. What was simulated is never lost: where it cannot go where asked, it
    /// goes to a temporary directory, and the exit code says something went wrong.
    fn write(&mut self, swept: &Swept) {
        let written = match self.written.take() {
            // Under the working directory, said `reports/<plan>/...` (no `./`) as it
            // always was.
            None => swept.write(Path::new(""), self.out, &self.stamp),
            Some(Ok(dir)) => swept.latest_files().write_into(&dir),
            // Said already: nowhere took it.
            Some(Err(e)) => {
                self.written = Some(Err(e));
                return;
            }
        };
        self.written = Some(written.or_else(|e| {
            eprintln!("error: {e}");
            if self.misplaced {
                return Err(e);
            }
            self.misplaced = true;
            swept.write_to_temp(&self.stamp)
        }));
    }
}
