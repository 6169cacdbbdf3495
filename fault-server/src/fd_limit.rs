//! The file-descriptor limit: each connection costs the server two descriptors (the stream
//! and its control handle), three in front of an upstream ([`per_connection`]), so a soft
//! limit of 1,024 is spent by about 500 idle clients (340 with an upstream). The binaries
//! raise the soft limit to the hard one at start, and say so when it stays low; the server
//! sizes its connection budget from what it got.

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
/// cost two descriptors each too (the control API is never forwarded to an upstream), so
/// they are bounded and kept out of the budget: a burst of newcomers past the budget
/// cannot take the descriptors an operator's `/healthz` needs (issue 26, bug 4). Sixteen:
/// a few orchestrator probes and scrapes at once, for 32 descriptors.
pub const OVER_BUDGET: usize = 16;

/// The descriptors one connection served in full costs: its stream and the stream's
/// control handle, and in front of an upstream (`--upstream`) the connection to the
/// upstream its request holds while it is forwarded.
pub fn per_connection(upstream: bool) -> u64 {
    if upstream { 3 } else { 2 }
}

/// How many connections are served in full in `limit` descriptors, [`per_connection`]
/// each, after the reserve and the [`OVER_BUDGET`] connections (two descriptors each).
pub fn connection_budget(limit: u64, upstream: bool) -> usize {
    let over_budget = OVER_BUDGET as u64 * per_connection(false);
    usize::try_from(
        limit.saturating_sub(RESERVE).saturating_sub(over_budget) / per_connection(upstream),
    )
    .unwrap_or(usize::MAX)
    .max(16)
}

/// [`connection_budget`] of this process's descriptor limit now; unbounded where the
/// limit cannot be read. What a server, or another crate's router served by its accept
/// loop, gets when it sets no budget of its own.
pub fn default_budget(upstream: bool) -> usize {
    current().map_or(usize::MAX, |limit| connection_budget(limit, upstream))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The descriptors a full budget takes, with the over-budget connections and the
    /// reserve.
    fn spent(limit: u64, upstream: bool) -> u64 {
        connection_budget(limit, upstream) as u64 * per_connection(upstream)
            + OVER_BUDGET as u64 * per_connection(false)
            + RESERVE
    }

    #[test]
    fn a_full_budget_fits_the_limit_at_two_descriptors_or_three_with_an_upstream() {
        for limit in [256, 1024, 4096, 65_536] {
            for upstream in [false, true] {
                let spent = spent(limit, upstream);
                assert!(spent <= limit, "{limit}, upstream {upstream}: {spent}");
                // Nothing left for one more connection: the budget promises all it can.
                let one_more = spent + per_connection(upstream);
                assert!(one_more > limit, "{limit}, upstream {upstream}: {spent}");
            }
        }
        assert_eq!(connection_budget(1024, false), 464);
        assert_eq!(connection_budget(1024, true), 309);
    }

    #[test]
    fn a_tiny_limit_still_budgets_sixteen_connections() {
        assert_eq!(connection_budget(0, false), 16);
        assert_eq!(connection_budget(100, true), 16);
    }
}
