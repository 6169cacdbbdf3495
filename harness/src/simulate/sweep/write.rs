//! The sweep's files, written as reports are ([`Files`]): atomically, and to a temporary
//! directory when they cannot go where they were asked.

use std::path::{Path, PathBuf};

use super::Swept;
use super::render::{html, markdown};
use crate::report::{Files, WriteError};

impl Swept {
    /// Each value's report in a directory of its own (`<n>-<value>/`), then the comparison:
    /// `sweep.json`, `sweep.md`, `sweep.html`.
    pub fn files(&self) -> Files {
        self.files_of(&self.runs)
    }

    /// The last value's report and the comparison: what changed since the value before,
    /// for a sweep written as it goes.
    pub fn latest_files(&self) -> Files {
        self.files_of(
            self.runs
                .last()
                .map(std::slice::from_ref)
                .unwrap_or_default(),
        )
    }

    fn files_of(&self, runs: &[super::ValueRun]) -> Files {
        let mut files = Files::new("sweep");
        for run in runs {
            files.nest(&run.dir, Files::report(&run.report));
        }
        let json =
            serde_json::to_string_pretty(&self.table).expect("the comparison always serialises");
        files.add("sweep.json", json);
        files.add("sweep.md", markdown(&self.table));
        files.add("sweep.html", html(&self.table));
        files
    }

    /// Writes the sweep into `out`, each file under a temporary name and renamed; or into
    /// `reports/<plan>/sweep-<stamp>/` under `root`, made whole in a hidden directory and
    /// renamed into place. Returns the directory.
    pub fn write(
        &self,
        root: &Path,
        out: Option<&Path>,
        stamp: &str,
    ) -> Result<PathBuf, WriteError> {
        let files = self.files();
        match out {
            Some(dir) => files.write_into(dir),
            None => files.write_new(
                &root.join("reports").join(&self.table.plan),
                &format!("sweep-{stamp}"),
            ),
        }
    }

    /// Writes the sweep into a fresh, private `chaos-sweep-<plan>-<stamp>-<suffix>/` under
    /// the system's temporary directory: where it goes when it cannot go where it was asked.
    pub fn write_to_temp(&self, stamp: &str) -> Result<PathBuf, WriteError> {
        self.files()
            .write_to_temp(&format!("chaos-sweep-{}-{stamp}", self.table.plan))
    }
}
