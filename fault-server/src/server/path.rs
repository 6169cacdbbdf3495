//! The request's path as the client sent it, kept beside the normal form
//! ([`chaos_wire::path`]) the request carries once the handler has read it.

use axum::http::Uri;

pub(crate) use crate::wire::path::normalise;

/// The request's target as the client sent it: what an upstream without a base path is
/// sent.
#[derive(Debug, Clone)]
pub(crate) struct AsSent(pub(crate) Uri);
