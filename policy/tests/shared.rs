//! One budget shared by a chain's hops (`share_budget`): the client takes retries out of
//! its token bucket for a request, every hop that retries spends from them, what comes
//! back unspent goes back into the bucket, and so the chain's retries never exceed what
//! the client's budget allows, whichever hops make them.

#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

use std::time::Duration;

use chaos_policy::{
    Action, Backoff, BudgetConfig, Client, GiveUp, Method, Outcome, Policy, PolicyConfig, Reply,
    Request, Session, Share, Start, Verdict,
};
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

const FAIL: Outcome = Outcome::Status(503);
const OK: Outcome = Outcome::Status(200);

fn client(max_attempts: u32, tokens: f64) -> Client {
    Client::new(
        Policy::new(PolicyConfig {
            max_attempts,
            backoff: Backoff::none(),
            budget: Some(BudgetConfig::TokenBucket {
                ratio: 0.5,
                max_tokens: 10.0,
                initial_tokens: tokens,
            }),
            ..PolicyConfig::default()
        })
        .unwrap(),
    )
}

/// A GET started at 0 that shares `share`.
fn start(c: &mut Client, share: Share) -> (Session, Action) {
    let start = Start {
        share,
        ..Start::default()
    };
    c.start(Request::new(Method::Get), Duration::ZERO, start)
}

/// An answer saying the hops below left `n` of the allowance.
fn left(outcome: Outcome, n: u32) -> Reply {
    Reply {
        allowance_left: Some(n),
        ..Reply::bare(outcome)
    }
}

fn answer(c: &mut Client, s: &mut Session, reply: Reply) -> Action {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let action = c.on_reply(s, Duration::ZERO, reply, &mut rng);
    match action {
        Action::Wait { .. } => c.on_timer(s, Duration::ZERO),
        other => other,
    }
}

#[test]
fn a_request_takes_its_share_and_gives_back_what_nobody_spent() {
    let mut c = client(4, 3.0);
    let (mut s, first) = start(&mut c, Share::Reserve(10));
    assert!(matches!(first, Action::Send { .. }));
    // All three tokens go with the request, and the bucket is empty meanwhile.
    assert_eq!(s.allowance(), Some(3));
    assert_eq!(c.budget_level(Duration::ZERO), Some(0.0));
    // The hop below spent one of them and failed: this client's retry spends another.
    assert!(matches!(
        answer(&mut c, &mut s, left(FAIL, 2)),
        Action::Send { .. }
    ));
    assert_eq!(s.allowance(), Some(1));
    // The retry succeeds with nothing spent below: the one left goes back, with the
    // success's refill (ratio 0.5).
    let done = answer(&mut c, &mut s, left(OK, 1));
    assert_eq!(done, Action::Done(Verdict::Succeeded { attempts: 2 }));
    assert_eq!(c.budget_level(Duration::ZERO), Some(1.5));
}

#[test]
fn a_hop_below_that_spent_everything_leaves_no_retry_for_the_hops_above() {
    let mut c = client(4, 2.0);
    let (mut s, _) = start(&mut c, Share::Reserve(10));
    let done = answer(&mut c, &mut s, left(FAIL, 0));
    assert!(
        matches!(
            done,
            Action::Done(Verdict::GaveUp {
                reason: GiveUp::BudgetExhausted,
                attempts: 1,
                ..
            })
        ),
        "{done:?}"
    );
    assert_eq!(c.budget_level(Duration::ZERO), Some(0.0));
}

#[test]
fn a_tier_spends_the_allowance_it_was_given_and_never_its_own_budget() {
    // A tier with a full budget of its own, given an allowance of one retry.
    let mut tier = client(4, 10.0);
    let (mut s, _) = start(&mut tier, Share::Allowance(1));
    assert!(matches!(
        answer(&mut tier, &mut s, Reply::bare(FAIL)),
        Action::Send { .. }
    ));
    assert_eq!(s.allowance(), Some(0));
    let done = answer(&mut tier, &mut s, Reply::bare(FAIL));
    assert!(matches!(
        done,
        Action::Done(Verdict::GaveUp {
            reason: GiveUp::BudgetExhausted,
            attempts: 2,
            ..
        })
    ));
    // Its own bucket was neither spent nor refilled by the shared allowance.
    assert_eq!(tier.budget_level(Duration::ZERO), Some(10.0));
    // An answer never gives back more than went down.
    let (mut s, _) = start(&mut tier, Share::Allowance(2));
    let _ = answer(&mut tier, &mut s, left(FAIL, 7));
    assert_eq!(s.allowance(), Some(1));
}

#[test]
fn an_attempt_without_an_answer_is_taken_to_have_spent_all_it_carried() {
    let mut c = client(4, 5.0);
    let (mut s, _) = start(&mut c, Share::Reserve(10));
    assert_eq!(s.allowance(), Some(5));
    // A timeout says nothing of what the hops below spent: the bound must hold anyway.
    let done = answer(&mut c, &mut s, Reply::bare(Outcome::AttemptTimeout));
    assert!(matches!(
        done,
        Action::Done(Verdict::GaveUp {
            reason: GiveUp::BudgetExhausted,
            ..
        })
    ));
    assert_eq!(s.allowance(), Some(0));
    assert_eq!(c.budget_level(Duration::ZERO), Some(0.0));
}

proptest! {
    /// Whatever the hops below spend and whatever the outcomes, a chain of requests never
    /// makes more retries than the client's bucket held and refilled.
    #[test]
    fn shared_retries_never_exceed_the_bucket(
        requests in prop::collection::vec(
            prop::collection::vec((any::<bool>(), 0u32..4), 1..6),
            1..40,
        ),
        initial in 0u32..6,
    ) {
        let mut c = client(5, f64::from(initial));
        let mut spent = 0u64; // retries by this client and the hops below
        let mut successes = 0u64;
        for answers in &requests {
            let (mut s, mut action) =
                start(&mut c, Share::Reserve(8));
            let mut answers = answers.iter();
            while let Action::Send { attempt, .. } = action {
                if attempt.is_retry() {
                    spent += 1;
                }
                let (ok, below) = *answers.next().unwrap_or(&(true, 0));
                let before = s.allowance().unwrap();
                let below = below.min(before);
                spent += u64::from(below);
                successes += u64::from(ok);
                action = answer(&mut c, &mut s, left(if ok { OK } else { FAIL }, before - below));
            }
        }
        // Tokens come from the start and from successes (0.5 each), and each retry
        // anywhere took one.
        let allowed = f64::from(initial) + 0.5 * successes as f64;
        prop_assert!(spent as f64 <= allowed, "spent {spent}, allowed {allowed}");
    }
}
