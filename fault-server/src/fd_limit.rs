//! The file-descriptor limit: each connection costs the server two descriptors (the stream
//! and its control handle), so a soft limit of 1,024 is spent by about 500 idle clients.
//! The binaries raise the soft limit to the hard one at start, and say so when it stays
//! low; the server sizes its connection budget from what it got.

use std::io;

/// Below this many descriptors the binaries warn: a few hundred idle clients fill it.
pub const LOW: u64 = 4096;

/// Descriptors kept out of the connection budget: the listener, files, the runtime, and
/// an embedding process's own sockets.
pub const RESERVE: u64 = 64;

/// The soft limit now, if the platform has one.
pub fn current() -> Option<u64> {
    #[cfg(unix)]
    {
        rlimit::getrlimit(rlimit::Resource::NOFILE)
            .ok()
            .map(|(soft, _)| soft)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Raises the soft limit to the hard one; returns the soft limit in force afterwards.
pub fn raise() -> io::Result<u64> {
    #[cfg(unix)]
    {
        rlimit::increase_nofile_limit(u64::MAX)
    }
    #[cfg(not(unix))]
    {
        Err(io::Error::other("no descriptor limit on this platform"))
    }
}

/// Connections served at once over budget, when every connection within it is busy:
/// each is served one request, and only one of the control API or a health check. They
/// cost two descriptors each too, so they are bounded and kept out of the budget: a burst
/// of newcomers past the budget cannot take the descriptors an operator's `/healthz`
/// needs (issue 26, bug 4). Sixteen: a few orchestrator probes and scrapes at once, for
/// 32 descriptors.
pub const OVER_BUDGET: usize = 16;

/// How many connections are served in full in `limit` descriptors, two each, after the
/// reserve and the [`OVER_BUDGET`] connections.
pub fn connection_budget(limit: u64) -> usize {
    usize::try_from(limit.saturating_sub(RESERVE) / 2)
        .unwrap_or(usize::MAX)
        .saturating_sub(OVER_BUDGET)
        .max(16)
}
