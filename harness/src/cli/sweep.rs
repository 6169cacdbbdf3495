//! `harness simulate PLAN --sweep KEY=V1,V2,...`: the sweep run, said and written.
//!
//! Exit 0 when every value ran (a sweep explores: a value whose gates fail is a finding,
//! shown in the table), 2 when the sweep or a value makes no plan, 3 when the results
//! could not be written where asked: they went to a temporary directory, named on stderr,
//! or nowhere.

use std::path::Path;
use std::time::SystemTime;

use super::{EXIT_CANNOT_RUN, EXIT_INVALID, EXIT_PASS};
use crate::report;
use crate::simulate::sweep::{self, Step};

pub(super) fn sweep(
    path: &Path,
    policies: &[String],
    seed: Option<u64>,
    out: Option<&Path>,
    spec: &str,
    quiet: bool,
) -> u8 {
    let say = |step: Step<'_>| {
        if !quiet {
            eprintln!("{} = {}: {}", step.key, step.value, step.effort.describe());
        }
    };
    let swept = match sweep::run(path, policies, seed, spec, say) {
        Ok(swept) => swept,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_INVALID;
        }
    };
    let (stamp, _) = report::timestamp(SystemTime::now());
    // What was simulated is never lost: where it cannot go where asked, it goes to a
    // temporary directory, and the exit code says something went wrong.
    let mut misplaced = false;
    // Under the working directory, said `reports/<plan>/...` (no `./`) as it always was.
    let written = swept.write(Path::new(""), out, &stamp).or_else(|e| {
        eprintln!("error: {e}");
        misplaced = true;
        swept.write_to_temp(&stamp)
    });
    if !quiet {
        print!("{}", sweep::markdown(&swept.table));
    }
    match &written {
        Ok(dir) => {
            if misplaced {
                eprintln!("  the sweep was written to {} instead", dir.display());
            }
            println!(
                "sweep of {}: {}",
                swept.table.key,
                dir.join("sweep.html").display()
            );
        }
        Err(e) => eprintln!("error: {e}: the sweep could not be written anywhere"),
    }
    if misplaced || written.is_err() {
        EXIT_CANNOT_RUN
    } else {
        EXIT_PASS
    }
}
