//! An attempt that waited for a connection (`load.max_connections`): what is left of its
//! timeout for the send. Pure, so the live engine and the simulator decide by the same
//! rule.

use std::time::Duration;

/// The shortest timeout an attempt is sent with: tokio's timers tick by the millisecond,
/// so an attempt with less left would time out before it could be answered, perhaps
/// before it was written.
const SHORTEST_TIMEOUT: Duration = Duration::from_millis(1);

/// What is left of an attempt's `timeout` after it `waited` for a connection, for the
/// send: `None` when too little is left to send it at all ([`SHORTEST_TIMEOUT`]), so it
/// ends unsent; `Some(None)` when it has no timeout. The live engine and the simulator
/// both decide by it.
pub fn left_after_wait(timeout: Option<Duration>, waited: Duration) -> Option<Option<Duration>> {
    match timeout.map(|t| t.saturating_sub(waited)) {
        Some(left) if left < SHORTEST_TIMEOUT => None,
        left => Some(left),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::left_after_wait;

    #[test]
    fn a_wait_leaves_the_rest_of_the_timeout_or_nothing_worth_sending() {
        let ms = Duration::from_millis;
        assert_eq!(left_after_wait(Some(ms(100)), ms(40)), Some(Some(ms(60))));
        assert_eq!(left_after_wait(Some(ms(100)), ms(99)), Some(Some(ms(1))));
        assert_eq!(
            left_after_wait(Some(ms(100)), Duration::from_micros(99_500)),
            None
        );
        assert_eq!(left_after_wait(Some(ms(100)), ms(150)), None);
        assert_eq!(left_after_wait(None, ms(150)), Some(None));
    }
}
