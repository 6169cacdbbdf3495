//! The harness: plans, the live engine, reports and gates.

pub use chaos_policy as policy;
