//! The program's stdout and stderr, each read on a thread of its own and kept up to
//! [`MAX_OUTPUT`], handed over by a deadline rather than at the end of the stream.
//!
//! Why a deadline: the end of a pipe comes when the last process holding it closes it,
//! and that need not be the program or anything the harness can stop (a process handed
//! the descriptor, or, off Linux, a `setsid` child). What was read by then is kept; the
//! thread still blocked in `read` is left behind and ends with the harness.

use std::io::Read;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Instant;

/// The most of each of the program's streams kept; the rest is counted, not kept.
pub const MAX_OUTPUT: usize = 1 << 20;

/// One stream being read.
#[derive(Debug)]
pub(super) struct Output {
    kept: Arc<Mutex<Kept>>,
    ended: mpsc::Receiver<()>,
}

#[derive(Debug, Default)]
struct Kept {
    bytes: Vec<u8>,
    dropped: usize,
}

/// Starts reading `stream` on a thread.
pub(super) fn keep(mut stream: impl Read + Send + 'static) -> Output {
    let kept = Arc::new(Mutex::new(Kept::default()));
    let (done, ended) = mpsc::channel();
    let shared = Arc::clone(&kept);
    thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut kept = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    let room = MAX_OUTPUT.saturating_sub(kept.bytes.len());
                    kept.bytes.extend_from_slice(&buffer[..n.min(room)]);
                    kept.dropped += n.saturating_sub(room);
                }
            }
        }
        let _ = done.send(());
    });
    Output { kept, ended }
}

impl Output {
    /// What was read by the stream's end or by `until`, whichever comes first.
    pub(super) fn until(self, until: Instant) -> String {
        let _ = self
            .ended
            .recv_timeout(until.saturating_duration_since(Instant::now()));
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = String::from_utf8_lossy(&kept.bytes).into_owned();
        if kept.dropped > 0 {
            text.push_str(&format!("\n[{} more bytes not kept]\n", kept.dropped));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::{Duration, Instant};

    use super::keep;

    /// A writer that never closes its end (a process the harness cannot stop) must not
    /// keep the run waiting: the read ends at its deadline with what came.
    #[test]
    fn a_stream_held_open_is_given_up_at_the_deadline() {
        let (reader, mut writer) = std::io::pipe().expect("a pipe");
        writer.write_all(b"partial").expect("written");
        let text = keep(reader).until(Instant::now());
        assert!("partial".starts_with(&text), "{text:?}");
        drop(writer);
    }

    #[test]
    fn a_stream_that_ends_is_read_whole() {
        let (reader, mut writer) = std::io::pipe().expect("a pipe");
        writer.write_all(b"whole").expect("written");
        drop(writer);
        let far = Instant::now() + Duration::from_secs(3600);
        assert_eq!(keep(reader).until(far), "whole");
    }
}
