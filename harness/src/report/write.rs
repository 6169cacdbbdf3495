//! Writing a report directory atomically.
//!
//! The files are written into a hidden sibling directory and renamed into place in one
//! step, and `latest` is repointed by renaming a fresh link over it, so a reader (or a CI
//! job that uploads `reports/<plan>/latest`) never sees half a report.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::model::Report;

#[derive(Debug, thiserror::Error)]
#[error("cannot write the report to {path}: {source}")]
pub struct WriteError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

fn at(path: &Path) -> impl FnOnce(io::Error) -> WriteError + '_ {
    move |source| WriteError {
        path: path.to_owned(),
        source,
    }
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
    let files = [
        ("report.json", super::json(report)),
        ("report.md", super::markdown(report)),
        ("report.html", super::html(report)),
        ("junit.xml", super::junit(report)),
    ];
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).map_err(at(dir))?;
        for (name, text) in &files {
            let path = dir.join(name);
            let tmp = dir.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, text).map_err(at(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(at(&path))?;
        }
        return Ok(Written {
            dir: dir.to_owned(),
            warning: None,
        });
    }
    let plan_dir = root.join("reports").join(&report.plan.name);
    std::fs::create_dir_all(&plan_dir).map_err(at(&plan_dir))?;
    let mut name = stamp.to_owned();
    let mut n = 1;
    while plan_dir.join(&name).exists() {
        n += 1;
        name = format!("{stamp}-{n}");
    }
    let tmp = plan_dir.join(format!(".{name}.tmp"));
    std::fs::create_dir_all(&tmp).map_err(at(&tmp))?;
    for (file, text) in &files {
        let path = tmp.join(file);
        std::fs::write(&path, text).map_err(at(&path))?;
    }
    let dir = plan_dir.join(&name);
    std::fs::rename(&tmp, &dir).map_err(at(&dir))?;
    let latest = plan_dir.join(LATEST);
    let warning = match point_latest(&plan_dir, &name) {
        Ok(()) => None,
        Err(e) => Some(format!("{} was left as it was: {e}", latest.display())),
    };
    Ok(Written { dir, warning })
}

/// Writes into a fresh directory under the system's temporary directory: where a measured
/// run goes when it cannot go where it was asked.
pub fn write_to_temp(report: &Report, stamp: &str) -> Result<Written, WriteError> {
    let dir = std::env::temp_dir().join(format!("chaos-report-{}-{stamp}", report.plan.name));
    write(report, Path::new("."), Some(&dir), stamp)
}

#[cfg(unix)]
const LATEST: &str = "latest";
#[cfg(not(unix))]
const LATEST: &str = "latest.txt";

/// Repoints `latest`, if it is ours: absent, or a link to a sibling directory name.
#[cfg(unix)]
fn point_latest(plan_dir: &Path, name: &str) -> io::Result<()> {
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
fn point_latest(plan_dir: &Path, name: &str) -> io::Result<()> {
    std::fs::write(plan_dir.join(LATEST), name)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::timestamp;

    #[test]
    fn timestamps_are_utc_civil_time() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_214_896);
        assert_eq!(timestamp(t).0, "20261202T123456Z");
        assert_eq!(timestamp(UNIX_EPOCH).1, "1970-01-01T00:00:00Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(timestamp(leap).1, "2000-02-29T00:00:00Z");
    }
}
