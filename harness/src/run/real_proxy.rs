//! A real nginx or HAProxy as a tier of a live run: the user's config, rewritten to listen
//! on loopback and to send to the next hop's peers, run by the binary the distribution
//! installed, for one policy's run, then stopped.
//!
//! Why the real binary and not a relay driving the imported model: the model is a claim
//! about the binary, and only the binary can check it. Its hop is counted from what the
//! next hop saw (`run/mod.rs`); the proxy itself is a black box.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::plan::proxy::{ProxyKind, ProxyTier, Rewrite};

/// How long a proxy may take to listen after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running proxy tier.
pub(super) struct RealProxy {
    name: String,
    child: std::process::Child,
    url: String,
    dir: PathBuf,
}

impl RealProxy {
    /// Starts tier `name`'s binary on a free loopback port, sending to `next` (the next
    /// hop's peers, in the order of the config's servers). Its config, logs and pid file
    /// live in a fresh private directory, removed when it stops.
    pub(super) async fn start(
        name: &str,
        tier: &ProxyTier,
        next: &[SocketAddr],
    ) -> Result<RealProxy, String> {
        let binary = find_binary(tier)?;
        let listen = free_port().map_err(|e| format!("tier `{name}`: no free port: {e}"))?;
        let dir = Private(private_dir(name).map_err(|e| format!("tier `{name}`: {e}"))?);
        let config = tier
            .rewrite(&Rewrite {
                listen,
                peers: next,
                dir: &dir.0,
            })
            .map_err(|e| format!("tier `{name}`: {e}"))?;
        let file = dir.0.join(match tier.model.kind {
            ProxyKind::Nginx => "nginx.conf",
            ProxyKind::Haproxy => "haproxy.cfg",
        });
        std::fs::write(&file, config).map_err(|e| format!("tier `{name}`: {e}"))?;
        let mut command = std::process::Command::new(&binary);
        match tier.model.kind {
            ProxyKind::Nginx => command
                .arg("-p")
                .arg(&dir.0)
                .arg("-c")
                .arg(&file)
                .arg("-e")
                .arg(dir.0.join("error.log")),
            ProxyKind::Haproxy => command.arg("-f").arg(&file).arg("-db"),
        };
        let log = std::fs::File::create(dir.0.join("stderr.log"))
            .map_err(|e| format!("tier `{name}`: {e}"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("tier `{name}`: cannot run {}: {e}", binary.display()))?;
        let mut proxy = RealProxy {
            name: name.to_owned(),
            child,
            url: format!("http://{listen}"),
            dir: dir.keep(),
        };
        proxy.listening(listen).await?;
        Ok(proxy)
    }

    pub(super) fn url(&self) -> &str {
        &self.url
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Waits until the proxy accepts connections, or says why it never will.
    async fn listening(&mut self, listen: SocketAddr) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "tier `{}` exited at start ({status}): {}",
                    self.name,
                    self.log_tail()
                ));
            }
            // Another process may have taken the port between its choice and the proxy's
            // bind: then the proxy exits, and what answered is not it.
            if tokio::net::TcpStream::connect(listen).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Ok(Some(status)) = self.child.try_wait() {
                    return Err(format!(
                        "tier `{}` exited at start ({status}): {}",
                        self.name,
                        self.log_tail()
                    ));
                }
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let tail = self.log_tail();
                return Err(format!(
                    "tier `{}` did not listen on {listen} within {} s: {tail}",
                    self.name,
                    START_TIMEOUT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last lines the proxy wrote, for an error.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(5).collect();
        let tail: Vec<&str> = lines.into_iter().rev().collect();
        if tail.is_empty() {
            "(it wrote nothing)".to_owned()
        } else {
            tail.join(" | ")
        }
    }

    /// Stops the proxy and removes its directory.
    pub(super) async fn stop(self) {
        // Dropped: killed, waited for, its directory removed.
    }
}

impl Drop for RealProxy {
    /// Both binaries run as one process here (nginx `master_process off`, HAProxy `-db`),
    /// so a kill leaves nothing behind; a run that fails or is interrupted stops it too.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The binary of a proxy tier: `binary:`, else the kind's name on `PATH`, else
/// `/usr/sbin/<kind>` (where Debian installs both).
fn find_binary(tier: &ProxyTier) -> Result<PathBuf, String> {
    let kind = tier.model.kind.name();
    if let Some(binary) = &tier.binary {
        return if binary.is_file() {
            Ok(binary.clone())
        } else {
            Err(format!(
                "`binary: {}` is not a file: install {kind} (`apt-get install {}`) or fix the path",
                binary.display(),
                package(tier.model.kind)
            ))
        };
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(kind));
    on_path
        .chain([Path::new("/usr/sbin").join(kind)])
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "{kind} is not installed (not on PATH nor in /usr/sbin): `apt-get install {}`, or name it with `binary:`; `harness simulate` runs the imported model without it",
                package(tier.model.kind)
            )
        })
}

fn package(kind: ProxyKind) -> &'static str {
    match kind {
        ProxyKind::Nginx => "nginx-light",
        ProxyKind::Haproxy => "haproxy",
    }
}

/// A loopback port free now (the proxy binds it a moment later).
fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()
}

/// A proxy's directory until the proxy owns it: removed if its start fails before.
struct Private(PathBuf);

impl Private {
    /// The directory, now the proxy's to remove.
    fn keep(mut self) -> PathBuf {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A fresh directory of the harness's own for one proxy's files, private to its user.
fn private_dir(name: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    for n in 0..1000u32 {
        let dir = base.join(format!("chaos-{name}-{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no fresh temporary directory"))
}
