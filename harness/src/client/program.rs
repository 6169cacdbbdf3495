//! The program under test as a child process: started with the target's URL, its output
//! kept (bounded), stopped with its whole process tree ([`super::tree`]) when it exits,
//! at the plan's end or on Ctrl-C.
//!
//! Why the tree: the program is often a shell script around the real client (`curl
//! --retry`), and killing only the shell would leave the client sending, and holding the
//! pipes this module reads to their end.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::output::{self, Output};
use super::tree::{self, BeforeSpawn};

pub use super::output::MAX_OUTPUT;

/// How often the supervisor looks at the program.
const POLL: Duration = Duration::from_millis(10);

/// How often the orphans the program left and that have exited are reaped meanwhile.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// How long the output is read for once the tree is gone, at the least: what is still in
/// the pipes is read in microseconds, and only a writer outside the tree (a process
/// handed the pipe, or on a system where the tree is the process group) holds it longer.
const FLUSH: Duration = Duration::from_millis(500);

/// Where `{url}` in the program's arguments goes, and the variable it also reads.
pub const URL_PLACEHOLDER: &str = "{url}";
pub const URL_VARIABLE: &str = "CHAOS_TARGET_URL";

/// How the program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it (not ours).
    Signalled(String),
    /// Still running at the plan's end: stopped.
    Stopped,
    /// Stopped because the run was interrupted.
    Interrupted,
}

impl Ended {
    /// How it ended, for the report's `Ended:` line.
    pub fn describe(&self) -> String {
        match self {
            Ended::Exited(code) => format!("exit {code}"),
            Ended::Signalled(how) => how.clone(),
            Ended::Stopped => "still running at the plan's end (duration + drain): stopped".into(),
            Ended::Interrupted => "stopped: the run was interrupted".into(),
        }
    }

    /// The run's warning about its end, if it deserves one: a program that exited 0 or
    /// was interrupted by the user does not.
    pub fn warning(&self) -> Option<String> {
        let how = match self {
            Ended::Exited(0) | Ended::Interrupted => return None,
            Ended::Exited(code) => format!("the program exited with code {code}"),
            Ended::Signalled(how) => format!("the program was ended by {how}"),
            Ended::Stopped => {
                "the program was still running at the plan's end (duration + drain) and was stopped"
                    .to_owned()
            }
        };
        Some(format!("{how}: see program.stderr beside the report"))
    }
}

/// What the program did.
#[derive(Debug, Clone)]
pub struct Finished {
    pub command: Vec<String>,
    pub ended: Ended,
    pub stdout: String,
    pub stderr: String,
}

/// The program could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start `{program}`: {source}")]
pub struct SpawnError {
    program: String,
    source: std::io::Error,
}

/// The command with `{url}` filled in.
pub fn command_line(command: &[String], url: &str) -> Vec<String> {
    command
        .iter()
        .map(|arg| arg.replace(URL_PLACEHOLDER, url))
        .collect()
}

/// Runs `command` (already filled in) to its end, or stops it after `limit` or when
/// `interrupted` is set. Blocks: run it on a thread of its own. Returns by `limit` plus
/// the tree's grace and kill time, whatever the program and its children do.
pub fn run(
    command: Vec<String>,
    url: &str,
    limit: Duration,
    interrupted: &AtomicBool,
) -> Result<Finished, SpawnError> {
    let (program, args) = command.split_first().expect("clap requires a command");
    let before = BeforeSpawn::take();
    let mut child = spawn(program, args, url).map_err(|source| SpawnError {
        program: program.clone(),
        source,
    })?;
    let tree = before.tree(&child);
    let stdout = child.stdout.take().map(output::keep);
    let stderr = child.stderr.take().map(output::keep);
    let start = Instant::now();
    let mut reaped = start;
    let ended = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break ended(status);
        }
        if interrupted.load(Ordering::Relaxed) {
            break Ended::Interrupted;
        }
        if start.elapsed() >= limit {
            break Ended::Stopped;
        }
        if reaped.elapsed() >= REAP_EVERY {
            tree.reap_exited();
            reaped = Instant::now();
        }
        thread::sleep(POLL);
    };
    // Whatever it started and left behind goes too: nothing outlives the run.
    tree.stop(&mut child);
    // A writer the tree did not hold keeps the pipes open: read no later than the plan's
    // end and the grace (on Ctrl-C, than now), and keep what came.
    let flushed = Instant::now() + FLUSH;
    let until = match ended {
        Ended::Interrupted => flushed,
        _ => (start + limit + tree::GRACE).max(flushed),
    };
    let text = |reader: Option<Output>| reader.map(|r| r.until(until)).unwrap_or_default();
    Ok(Finished {
        command,
        ended,
        stdout: text(stdout),
        stderr: text(stderr),
    })
}

fn spawn(program: &str, args: &[String], url: &str) -> std::io::Result<Child> {
    let mut command = Command::new(program);
    command
        .args(args)
        .env(URL_VARIABLE, url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    command.spawn()
}

fn ended(status: ExitStatus) -> Ended {
    if let Some(code) = status.code() {
        return Ended::Exited(code);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return Ended::Signalled(format!("signal {signal}"));
        }
    }
    Ended::Signalled("ended without an exit code".into())
}
