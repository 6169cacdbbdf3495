//! The program under test as a child process: started with the target's URL, its output
//! kept (bounded), stopped with its whole process group at the plan's end or on Ctrl-C.
//!
//! Why a process group: the program is often a shell script around the real client
//! (`curl --retry`), and killing only the shell would leave the client sending, and
//! holding the pipes this module reads to their end.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The most of each of the program's streams kept; the rest is counted, not kept.
pub const MAX_OUTPUT: usize = 1 << 20;

/// How long a program has between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(2);

/// How often the supervisor looks at the program.
const POLL: Duration = Duration::from_millis(10);

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
    pub fn describe(&self) -> String {
        match self {
            Ended::Exited(code) => format!("exit {code}"),
            Ended::Signalled(how) => how.clone(),
            Ended::Stopped => "still running at the plan's end (duration + drain): stopped".into(),
            Ended::Interrupted => "stopped: the run was interrupted".into(),
        }
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
/// `interrupted` is set. Blocks: run it on a thread of its own.
pub fn run(
    command: Vec<String>,
    url: &str,
    limit: Duration,
    interrupted: &AtomicBool,
) -> Result<Finished, SpawnError> {
    let (program, args) = command.split_first().expect("clap requires a command");
    let mut child = spawn(program, args, url).map_err(|source| SpawnError {
        program: program.clone(),
        source,
    })?;
    let stdout = child.stdout.take().map(keep);
    let stderr = child.stderr.take().map(keep);
    let start = Instant::now();
    let ended = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break ended(status);
        }
        if interrupted.load(Ordering::Relaxed) {
            stop(&mut child);
            break Ended::Interrupted;
        }
        if start.elapsed() >= limit {
            stop(&mut child);
            break Ended::Stopped;
        }
        thread::sleep(POLL);
    };
    // Whatever it started and left behind goes too: nothing outlives the run.
    signal_group(&child, Signal::Kill);
    let text = |reader: Option<thread::JoinHandle<String>>| {
        reader.and_then(|r| r.join().ok()).unwrap_or_default()
    };
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

/// Reads a stream to its end on a thread, keeping the first [`MAX_OUTPUT`] bytes.
fn keep(mut stream: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buffer = [0u8; 8192];
        let mut dropped = 0usize;
        loop {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = MAX_OUTPUT.saturating_sub(kept.len());
                    kept.extend_from_slice(&buffer[..n.min(room)]);
                    dropped += n.saturating_sub(room);
                }
            }
        }
        let mut text = String::from_utf8_lossy(&kept).into_owned();
        if dropped > 0 {
            text.push_str(&format!("\n[{dropped} more bytes not kept]\n"));
        }
        text
    })
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

#[derive(Clone, Copy)]
enum Signal {
    Term,
    Kill,
}

/// SIGTERM to the program's group, SIGKILL after [`GRACE`].
fn stop(child: &mut Child) {
    signal_group(child, Signal::Term);
    let start = Instant::now();
    while start.elapsed() < GRACE {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(POLL);
    }
    signal_group(child, Signal::Kill);
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(target_os = "linux")]
fn signal_group(child: &Child, signal: Signal) {
    use rustix::process::{Pid, Signal as S, kill_process_group};
    let signal = match signal {
        Signal::Term => S::TERM,
        Signal::Kill => S::KILL,
    };
    // The group is the child's own (`process_group(0)`); gone already is fine.
    let _ = kill_process_group(Pid::from_child(child), signal);
}

#[cfg(not(target_os = "linux"))]
fn signal_group(child: &Child, _signal: Signal) {
    // Only the program itself, elsewhere: what it started may outlive it.
    let _ = child.id();
}
