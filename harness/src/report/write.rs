//! Writing a report directory atomically.
//!
//! A directory's files ([`Files`]: a report's four, or a sweep's comparison with a report
//! per value) are written into a hidden sibling directory and renamed into place in one
//! step, and `latest` is repointed by renaming a fresh link over it, so a reader (or a CI
//! job that uploads `reports/<plan>/latest`) never sees half a report. Into a directory
//! that is given (`--out`), each file is written under a temporary name and renamed. What
//! cannot go where it was asked goes to a fresh, private directory of its own under the
//! system's temporary directory ([`Files::write_to_temp`]): a measured run is never lost, and
//! a run never writes through a name somebody else planted. Every file is created new
//! (`O_EXCL`) under an unguessable name and renamed into place.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::model::Report;

#[derive(Debug, thiserror::Error)]
#[error("cannot write the {what} to {path}: {source}")]
pub struct WriteError {
    /// What was being written: `report`, `sweep`.
    pub what: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// The files of one directory, written as one: each file's path inside the directory
/// (nested directories are made as needed) and its text.
#[derive(Debug, Clone)]
pub struct Files {
    /// What the files are, for errors: `report`, `sweep`.
    what: &'static str,
    files: Vec<(PathBuf, String)>,
}

impl Files {
    /// No files yet; `what` names them in errors.
    pub fn new(what: &'static str) -> Files {
        Files {
            what,
            files: Vec::new(),
        }
    }

    /// A report's four files: `report.json`, `report.md`, `report.html`, `junit.xml`.
    pub fn report(report: &Report) -> Files {
        let mut files = Files::new("report");
        files.add("report.json", super::json(report));
        files.add("report.md", super::markdown(report));
        files.add("report.html", super::html(report));
        files.add("junit.xml", super::junit(report));
        // A client test's program output, beside the report that judged it.
        for client in report.policies.iter().filter_map(|p| p.client.as_ref()) {
            files.add("program.stdout", client.stdout.clone());
            files.add("program.stderr", client.stderr.clone());
        }
        files
    }

    /// One more file, at `path` inside the directory.
    pub fn add(&mut self, path: impl Into<PathBuf>, text: String) {
        self.files.push((path.into(), text));
    }

    /// Another set's files, in the directory `dir` inside this one.
    pub fn nest(&mut self, dir: &str, other: Files) {
        self.files.extend(
            other
                .files
                .into_iter()
                .map(|(path, text)| (Path::new(dir).join(path), text)),
        );
    }

    fn at<'a>(&self, path: &'a Path) -> impl FnOnce(io::Error) -> WriteError + 'a {
        let what = self.what;
        move |source| WriteError {
            what,
            path: path.to_owned(),
            source,
        }
    }

    /// Into `dir` (made if need be), each file written under a temporary name beside it
    /// and renamed into place: a file is whole or absent, the directory may be mixed.
    pub fn write_into(&self, dir: &Path) -> Result<PathBuf, WriteError> {
        std::fs::create_dir_all(dir).map_err(self.at(dir))?;
        for (name, text) in &self.files {
            let path = dir.join(name);
            let parent = path.parent().unwrap_or(dir);
            std::fs::create_dir_all(parent).map_err(self.at(parent))?;
            let file = path
                .file_name()
                .map_or_else(|| "file".into(), OsStr::to_string_lossy);
            let tmp = parent.join(format!(".{file}.{}.tmp", unguessable()));
            create_new(&tmp, text).map_err(self.at(&tmp))?;
            // rename replaces a link planted at `path` rather than writing through it.
            std::fs::rename(&tmp, &path).map_err(self.at(&path))?;
        }
        Ok(dir.to_owned())
    }

    /// Into a new directory under `parent`, named `name` (`name-2`, `name-3`, ... when that
    /// is taken), made whole in a hidden sibling and renamed into place in one step.
    pub fn write_new(&self, parent: &Path, name: &str) -> Result<PathBuf, WriteError> {
        std::fs::create_dir_all(parent).map_err(self.at(parent))?;
        let mut free = name.to_owned();
        let mut n = 1;
        while std::fs::symlink_metadata(parent.join(&free)).is_ok() {
            n += 1;
            free = format!("{name}-{n}");
        }
        let tmp = self.fresh_dir(parent, &format!(".{free}"), 0o777)?;
        self.fill(&tmp)?;
        let dir = parent.join(&free);
        std::fs::rename(&tmp, &dir).map_err(self.at(&dir))?;
        Ok(dir)
    }

    /// Into a fresh directory of this process's own under the system's temporary directory,
    /// named `name-` and an unguessable suffix: where measurements go when they cannot go
    /// where they were asked. The directory is created exclusively (a name taken, or a link
    /// planted there, is passed over) and private to the user, and each file in it is
    /// created new, so nothing planted in a shared `/tmp` is written through or replaced.
    pub fn write_to_temp(&self, name: &str) -> Result<PathBuf, WriteError> {
        let dir = self.fresh_dir(&std::env::temp_dir(), name, 0o700)?;
        self.fill(&dir)?;
        Ok(dir)
    }

    /// Makes `parent/prefix-SUFFIX`, a directory that did not exist, with `mode` (before the
    /// umask), trying fresh suffixes while the name is taken.
    fn fresh_dir(&self, parent: &Path, prefix: &str, mode: u32) -> Result<PathBuf, WriteError> {
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, mode);
        #[cfg(not(unix))]
        let _ = mode;
        let mut last = parent.join(prefix);
        for _ in 0..64 {
            last = parent.join(format!("{prefix}-{}", unguessable()));
            match builder.create(&last) {
                Ok(()) => return Ok(last),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(self.at(&last)(e)),
            }
        }
        Err(self.at(&last)(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "64 fresh names in a row were taken",
        )))
    }

    /// Writes every file into `dir`, a directory nobody else has seen yet: each file and
    /// nested directory is created new.
    fn fill(&self, dir: &Path) -> Result<(), WriteError> {
        for (file, text) in &self.files {
            let path = dir.join(file);
            if let Some(nested) = path.parent() {
                std::fs::create_dir_all(nested).map_err(self.at(nested))?;
            }
            create_new(&path, text).map_err(self.at(&path))?;
        }
        Ok(())
    }
}

/// Writes `text` to a file that must not exist yet: `O_CREAT | O_EXCL` refuses a name that
/// is taken, a planted link included, so nothing is written through a link.
fn create_new(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// Eight hex digits nobody can guess in advance: std seeds each `RandomState` from the OS.
fn unguessable() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:08x}", h.finish() as u32)
}

/// A run's id: its start, UTC, and eight unguessable hex digits
/// (`20261204T233015Z-3fa9c2d1`): unique among runs, and sorted by time.
pub fn run_id(started: SystemTime) -> String {
    format!("{}-{}", timestamp(started).0, unguessable())
}

/// `YYYYMMDDTHHMMSSZ` for now, UTC.
pub fn timestamp(now: SystemTime) -> (String, String) {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (
        format!("{y:04}{mo:02}{d:02}T{h:02}{m:02}{s:02}Z"),
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z"),
    )
}

/// Where a report went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub dir: PathBuf,
    /// Why `latest` was left as it was, if it was.
    pub warning: Option<String>,
}

/// Writes the four files. With `out`, into that directory; otherwise into
/// `reports/<plan>/<stamp>/` under `root`, and points `reports/<plan>/latest` at it (unless
/// `latest` is something other than our own link: that is left alone, with a warning).
pub fn write(
    report: &Report,
    root: &Path,
    out: Option<&Path>,
    stamp: &str,
) -> Result<Written, WriteError> {
    let files = Files::report(report);
    if let Some(dir) = out {
        return Ok(Written {
            dir: files.write_into(dir)?,
            warning: None,
        });
    }
    let plan_dir = root.join("reports").join(&report.plan.name);
    let dir = files.write_new(&plan_dir, stamp)?;
    let latest = plan_dir.join(LATEST);
    let name = dir
        .file_name()
        .expect("write_new returns its parent joined with a name");
    let warning = match point_latest(&plan_dir, name) {
        Ok(()) => None,
        Err(e) => Some(format!("{} was left as it was: {e}", latest.display())),
    };
    Ok(Written { dir, warning })
}

/// Writes into a fresh, private directory `chaos-report-<plan>-<stamp>-<suffix>` under the
/// system's temporary directory: where a measured run goes when it cannot go where asked.
pub fn write_to_temp(report: &Report, stamp: &str) -> Result<Written, WriteError> {
    let name = format!("chaos-report-{}-{stamp}", report.plan.name);
    Ok(Written {
        dir: Files::report(report).write_to_temp(&name)?,
        warning: None,
    })
}

#[cfg(unix)]
const LATEST: &str = "latest";
#[cfg(not(unix))]
const LATEST: &str = "latest.txt";

/// Repoints `latest`, if it is ours: absent, or a link to a sibling directory name.
#[cfg(unix)]
fn point_latest(plan_dir: &Path, name: &OsStr) -> io::Result<()> {
    let latest = plan_dir.join(LATEST);
    match std::fs::symlink_metadata(&latest) {
        Ok(meta) if !meta.file_type().is_symlink() => {
            return Err(io::Error::other(
                "it is not a link the harness made; move it away to let the harness point it at the newest report",
            ));
        }
        Ok(_) => {
            let target = std::fs::read_link(&latest)?;
            if target.components().count() != 1 {
                return Err(io::Error::other(format!(
                    "it links to {}, not to a report beside it; remove it to let the harness manage it",
                    target.display()
                )));
            }
        }
        Err(_) => {}
    }
    let tmp = plan_dir.join(".latest.tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(name, &tmp)?;
    std::fs::rename(&tmp, latest)
}

#[cfg(not(unix))]
fn point_latest(plan_dir: &Path, name: &OsStr) -> io::Result<()> {
    std::fs::write(plan_dir.join(LATEST), name.to_string_lossy().as_bytes())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::{Duration, UNIX_EPOCH};

    use super::{Files, timestamp};

    /// A fresh directory of this test's own under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("harness-write-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn nested() -> Files {
        let mut inner = Files::new("report");
        inner.add("report.json", "{}".to_owned());
        let mut files = Files::new("sweep");
        files.add("sweep.json", "[]".to_owned());
        files.nest("1-0.1", inner);
        files
    }

    #[test]
    fn nested_files_land_in_their_directories_and_no_temporary_name_is_left() {
        let dir = scratch("into");
        nested().write_into(&dir).expect("written");
        assert_eq!(
            std::fs::read_to_string(dir.join("sweep.json"))
                .ok()
                .as_deref(),
            Some("[]")
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("1-0.1/report.json"))
                .ok()
                .as_deref(),
            Some("{}")
        );
        let hidden = |d: PathBuf| {
            std::fs::read_dir(d)
                .expect("list")
                .filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().starts_with('.'))
        };
        assert!(!hidden(dir.clone()) && !hidden(dir.join("1-0.1")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_new_directory_takes_the_next_free_name_and_leaves_no_hidden_one() {
        let parent = scratch("new");
        let first = nested().write_new(&parent, "sweep-x").expect("written");
        let second = nested().write_new(&parent, "sweep-x").expect("written");
        assert_eq!(first, parent.join("sweep-x"));
        assert_eq!(second, parent.join("sweep-x-2"));
        assert!(second.join("1-0.1/report.json").is_file());
        let names: Vec<String> = std::fs::read_dir(&parent)
            .expect("list")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let _ = std::fs::remove_dir_all(&parent);
    }

    #[test]
    #[cfg(unix)]
    fn links_planted_at_a_files_or_a_directorys_name_are_never_written_through() {
        let parent = scratch("planted");
        let victim = parent.join("victim");
        std::fs::create_dir_all(&victim).expect("made");
        std::fs::write(victim.join("theirs"), "theirs").expect("written");
        let dir = parent.join("out");
        std::fs::create_dir_all(&dir).expect("made");
        std::os::unix::fs::symlink(victim.join("theirs"), dir.join("sweep.json")).expect("link");
        nested().write_into(&dir).expect("written");
        let meta = std::fs::symlink_metadata(dir.join("sweep.json")).expect("there");
        assert!(meta.is_file(), "the link was replaced by the file");
        std::os::unix::fs::symlink(&victim, parent.join("sweep-x")).expect("link");
        let new = nested().write_new(&parent, "sweep-x").expect("written");
        assert_eq!(
            new,
            parent.join("sweep-x-2"),
            "a planted link's name is taken"
        );
        assert_eq!(
            std::fs::read_dir(&victim).expect("list").count(),
            1,
            "nothing went into the link's target"
        );
        assert_eq!(
            std::fs::read_to_string(victim.join("theirs"))
                .ok()
                .as_deref(),
            Some("theirs")
        );
        let _ = std::fs::remove_dir_all(&parent);
    }

    #[test]
    fn an_error_names_what_was_written_and_where() {
        let parent = scratch("error");
        std::fs::create_dir_all(&parent).expect("made");
        std::fs::write(parent.join("file"), "").expect("written");
        let e = nested()
            .write_into(&parent.join("file/sweep"))
            .expect_err("no directory under a file");
        assert!(
            e.to_string().starts_with("cannot write the sweep to "),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&parent);
    }

    #[test]
    fn timestamps_are_utc_civil_time() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_214_896);
        assert_eq!(timestamp(t).0, "20261202T123456Z");
        assert_eq!(timestamp(UNIX_EPOCH).1, "1970-01-01T00:00:00Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(timestamp(leap).1, "2000-02-29T00:00:00Z");
    }
}
