//! The router, and the control API: `/__chaos/script`, `/__chaos/reset`,
//! `/__chaos/ledger`, plus `/healthz` and `/metrics`.
//!
//! Why these are separate routes ahead of the fallback: control requests are never
//! faulted and never enter the ledger, whatever the script says, so a harness can always
//! reach the server it is breaking. An optional bearer token guards `/__chaos/` (not
//! `/healthz` and `/metrics`, which scrapers and orchestrators poll without credentials).

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde::Serialize;
use tokio_util::either::Either;

use super::body::{BodyError, read_body};
use super::conn::{DeadlineBody, Serve};
use super::handler;
use super::state::{Shared, View};
use crate::duration::format_duration;
use crate::ledger::ScriptChange;
use crate::metrics::Format;
use crate::script::{HeaderLookup, MAX_SCRIPT_BYTES, Script, ScriptError};
use crate::wire;

/// What the accept loop serves: requests for the control API through its router, every
/// other request straight to the fault handler. The router would hand those to the same
/// handler as its fallback; going straight skips its path matching and the boxing of a
/// route's future on the path every faulted request takes.
///
/// One per connection (the accept loop clones it for each), each with its connection's
/// [`View`] of the server.
pub(crate) struct Dispatch {
    router: Router,
    shared: Arc<Shared>,
    view: RefCell<Option<Arc<View>>>,
}

impl Dispatch {
    pub(crate) fn new(shared: Arc<Shared>) -> Dispatch {
        Dispatch {
            router: router(Arc::clone(&shared)),
            shared,
            view: RefCell::new(None),
        }
    }

    /// The connection's view, taken again when the script has changed since.
    fn view(&self) -> Arc<View> {
        let mut cached = self.view.borrow_mut();
        match &*cached {
            Some(view) if view.is_current() => Arc::clone(view),
            _ => Arc::clone(cached.insert(Arc::new(View::now(&self.shared)))),
        }
    }
}

impl Clone for Dispatch {
    /// For another connection: the same router and state, a view of its own.
    fn clone(&self) -> Dispatch {
        Dispatch {
            router: self.router.clone(),
            shared: Arc::clone(&self.shared),
            view: RefCell::new(None),
        }
    }
}

impl Serve for Dispatch {
    fn serve(
        &self,
        request: hyper::Request<DeadlineBody>,
    ) -> impl Future<Output = Response> + Send + use<> {
        // A superset of the control routes: a path here the router does not know (say
        // `/__chaosx`) still reaches the handler, as its fallback.
        if always_serve(request.uri().path()) {
            Either::Left(self.router.serve(request))
        } else {
            Either::Right(handler::handle(self.view(), request.map(Body::new)))
        }
    }

    fn accepted(&self) {
        self.shared
            .metrics
            .connections_accepted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The paths a connection over budget is still served: the control API and health
/// checks, so an operator can always see and stop a server that is being flooded.
pub(crate) fn always_serve(path: &str) -> bool {
    path == "/healthz" || path == "/metrics" || path.starts_with("/__chaos")
}

/// The whole router: control routes, then every other request to the fault handler.
fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route(
            "/__chaos/script",
            get(get_script)
                .put(put_script)
                .fallback(|s: State<Arc<Shared>>, h: HeaderMap| wrong_method(s, h, "GET, PUT")),
        )
        .route(
            "/__chaos/reset",
            post(reset).fallback(|s: State<Arc<Shared>>, h: HeaderMap| wrong_method(s, h, "POST")),
        )
        .route(
            "/__chaos/ledger",
            get(ledger).fallback(|s: State<Arc<Shared>>, h: HeaderMap| wrong_method(s, h, "GET")),
        )
        .route("/__chaos", any(not_found))
        .route("/__chaos/", any(not_found))
        .route("/__chaos/{*rest}", any(not_found))
        .fallback(|State(shared): State<Arc<Shared>>, request: Request| {
            handler::handle(Arc::new(View::now(&shared)), request)
        })
        .with_state(shared)
}

/// Every way a control request fails.
#[derive(Debug)]
enum AppError {
    Unauthorized,
    Body(BodyError),
    BadScript(ScriptError),
    NotUtf8,
    EmptyScript,
    /// The parser's task panicked (a bug).
    ParserFailed,
    NotFound,
    /// A method the route does not take; the ones it does.
    WrongMethod(&'static str),
    BadClockIn(String),
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match self {
            AppError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                [(WWW_AUTHENTICATE, "Bearer realm=\"fault-server\"")],
                "the control API needs `Authorization: Bearer <token>`\n",
            )
                .into_response(),
            AppError::Body(error) => {
                (error.status(), format!("invalid script: {error}\n")).into_response()
            }
            AppError::BadScript(error) => {
                (StatusCode::BAD_REQUEST, format!("invalid script: {error}\n")).into_response()
            }
            AppError::WrongMethod(allow) => (
                StatusCode::METHOD_NOT_ALLOWED,
                [(axum::http::header::ALLOW, allow)],
                format!("this control endpoint takes {allow}\n"),
            )
                .into_response(),
            AppError::BadClockIn(ms) => (
                StatusCode::BAD_REQUEST,
                format!(
                    "invalid reset: `{}={ms}` is not a whole number of milliseconds up to {}\n",
                    wire::RESET_CLOCK_IN,
                    MAX_CLOCK_IN.as_millis()
                ),
            )
                .into_response(),
            AppError::NotUtf8 => (
                StatusCode::BAD_REQUEST,
                "invalid script: the body is not UTF-8 text\n",
            )
                .into_response(),
            AppError::EmptyScript => (
                StatusCode::BAD_REQUEST,
                "invalid script: the body is empty; to clear the script, PUT `faults: []`\n",
            )
                .into_response(),
            AppError::ParserFailed => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the script parser failed\n",
            )
                .into_response(),
            AppError::NotFound => (
                StatusCode::NOT_FOUND,
                "no such control endpoint: use PUT|GET /__chaos/script, POST /__chaos/reset, GET /__chaos/ledger\n",
            )
                .into_response(),
        }
    }
}

impl From<ScriptError> for AppError {
    fn from(error: ScriptError) -> Self {
        AppError::BadScript(error)
    }
}

impl From<BodyError> for AppError {
    fn from(error: BodyError) -> Self {
        AppError::Body(error)
    }
}

fn count_control(shared: &Shared) {
    shared
        .metrics
        .control_requests
        .fetch_add(1, Ordering::Relaxed);
}

/// Checks the bearer token, when one is configured (comparison in constant time).
fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), AppError> {
    count_control(shared);
    let Some(token) = &shared.token else {
        return Ok(());
    };
    let presented = headers
        .header(AUTHORIZATION.as_str())
        .and_then(bearer_credentials);
    match presented {
        Some(presented) if constant_time_eq(presented.as_bytes(), token.as_bytes()) => Ok(()),
        _ => Err(AppError::Unauthorized),
    }
}

/// The credentials of an `Authorization: Bearer …` value. RFC 9110 §11.1: the scheme is
/// case-insensitive (`bearer`, `BEARER`), one or more spaces separate it from the
/// credentials; around them only SP and HTAB (OWS, §5.6.3) are trimmed. Not Unicode
/// whitespace: `str::trim` would strip U+00A0, U+3000 or U+0085 too, and a credential of
/// those alone would be presented as the empty string.
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim_matches([' ', '\t']))
}

/// Equal, in a time that depends on the lengths only (the token's length is no secret
/// worth the trouble; its bytes are).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `ok`, marked as a fault-server's: the harness recognises one by it before it sends a
/// script (a service of the user's own must never get one).
async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    count_control(&shared);
    ([(wire::SERVER, wire::server_name())], "ok\n").into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    count_control(&shared);
    let phases = shared.active().script.phase_count();
    let format = Format::from_accept(
        headers
            .get(axum::http::header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    );
    let text = shared
        .metrics
        .render(&shared.ledger, shared.capacity_gauges(), phases, format);
    ([(CONTENT_TYPE, format.content_type())], text).into_response()
}

#[derive(Serialize)]
struct ScriptSummary {
    ok: bool,
    phases: Vec<String>,
    capacity: Option<String>,
    seed: u64,
    last_fault_end: Option<String>,
}

fn summary(shared: &Shared) -> ScriptSummary {
    let active = shared.active();
    let script = &active.script;
    ScriptSummary {
        ok: true,
        phases: (0..script.phase_count())
            .filter_map(|i| script.phase_name(i).map(str::to_string))
            .collect(),
        capacity: script.capacity().map(|c| {
            format!(
                "capacity {}, queue {}, service_time {}, reject_status {}",
                c.capacity
                    .map_or_else(|| "unlimited".to_string(), |c| c.to_string()),
                c.queue,
                c.service_time,
                c.reject_status
            )
        }),
        seed: active.seed,
        last_fault_end: script.last_fault_end().map(format_duration),
    }
}

/// Installs a script. In this order, so no step costs more than the one before allows:
/// the token (before a byte of the body is read: a stranger gets 401, never 413), the
/// body within [`MAX_SCRIPT_BYTES`], UTF-8, not empty (an accidental empty body must not
/// clear the script: `faults: []` does that), then the depth guard and the parser, on a
/// blocking thread, one script at a time, so a costly script never holds a serving
/// worker.
async fn put_script(
    State(shared): State<Arc<Shared>>,
    request: Request,
) -> Result<Response, AppError> {
    let (parts, body) = request.into_parts();
    authorize(&shared, &parts.headers)?;
    let body = read_body(body, MAX_SCRIPT_BYTES).await?;
    let text = String::from_utf8(body.into()).map_err(|_| AppError::NotUtf8)?;
    if is_blank(&text) {
        return Err(AppError::EmptyScript);
    }
    let script = {
        // The semaphore is never closed: acquiring only waits.
        let _turn = shared.script_parse.acquire().await;
        let parsing = Arc::clone(&shared);
        tokio::task::spawn_blocking(move || {
            let _gauge = parsing.metrics.parsing();
            Script::from_yaml_str(&text)
        })
        .await
        .map_err(|_| AppError::ParserFailed)??
    };
    // Who says so: the harness marks its own runs; anything else is someone's by hand.
    let origin = match parts.headers.get(wire::SCRIPT_BY).map(|v| v.as_bytes()) {
        Some(b) if b == wire::ORIGIN_HARNESS.as_bytes() => wire::ORIGIN_HARNESS,
        _ => wire::ORIGIN_CONTROL,
    };
    let before = shared.active();
    let was = describe(&before);
    let at = tokio::time::Instant::now().saturating_duration_since(before.epoch);
    shared.install(script, origin);
    let change = ScriptChange {
        at_ms: u64::try_from(at.as_millis()).unwrap_or(u64::MAX),
        origin: origin.to_owned(),
        now: describe(&shared.active()),
        was,
    };
    if let Some(log) = &shared.script_log {
        (log.0)(&format!(
            "fault-server: script replaced over the control API by {origin}: now {}; was {}",
            change.now, change.was
        ));
    }
    shared.ledger.note_script(change);
    Ok(axum::Json(summary(&shared)).into_response())
}

/// A script in a few words, for the log: its phases by name, its capacity, its origin.
fn describe(active: &super::state::Active) -> String {
    let script = &active.script;
    let phases: Vec<String> = (0..script.phase_count())
        .filter_map(|i| script.phase_name(i).map(str::to_string))
        .collect();
    let mut words = match phases.len() {
        0 => "no fault phases".to_owned(),
        n => format!(
            "{n} fault phase(s) ({})",
            crate::script::listed_names(&phases)
        ),
    };
    if let Some(c) = script.capacity() {
        words.push_str(&format!(
            ", capacity {}",
            c.capacity
                .map_or_else(|| "unlimited".to_string(), |c| c.to_string())
        ));
    }
    words.push_str(&format!(" [{}]", active.origin));
    words
}

/// Nothing but blank lines and comments: a document that says nothing.
fn is_blank(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#')
    })
}

async fn get_script(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    authorize(&shared, &headers)?;
    let active = shared.active();
    Ok((
        [(wire::SCRIPT_ORIGIN, active.origin)],
        axum::Json(active.script.spec().clone()),
    )
        .into_response())
}

/// `POST /__chaos/reset`, and `?clock_in_ms=N` ([`wire::RESET_CLOCK_IN`]): the ledger is
/// cleared now and the run clock starts N ms later (at most [`MAX_CLOCK_IN`]), the
/// instant a sharded run's shards agreed to start at.
async fn reset(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Result<Response, AppError> {
    authorize(&shared, &headers)?;
    let delay = match query.get(wire::RESET_CLOCK_IN) {
        None => Duration::ZERO,
        Some(ms) => ms
            .parse::<u64>()
            .ok()
            .map(Duration::from_millis)
            .filter(|d| *d <= MAX_CLOCK_IN)
            .ok_or_else(|| AppError::BadClockIn(ms.clone()))?,
    };
    shared.reset_clock_in(delay);
    Ok(axum::Json(summary(&shared)).into_response())
}

/// The furthest ahead a reset may start the run clock.
const MAX_CLOCK_IN: Duration = Duration::from_secs(60);

async fn ledger(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    authorize(&shared, &headers)?;
    Ok(axum::Json(shared.ledger.snapshot()).into_response())
}

/// A method a control route does not take: the token is checked first, so a caller
/// without it learns nothing of the routes (axum's own 405 came before any handler).
async fn wrong_method(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    allow: &'static str,
) -> Result<Response, AppError> {
    authorize(&shared, &headers)?;
    Err(AppError::WrongMethod(allow))
}

async fn not_found(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    authorize(&shared, &headers)?;
    Err(AppError::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: &str, expected: Option<&str>) {
        assert_eq!(bearer_credentials(value), expected, "{value:?}");
    }

    #[test]
    fn bearer_credentials_trim_only_spaces_and_tabs() {
        check("Bearer s3cret", Some("s3cret"));
        check("bearer s3cret", Some("s3cret"));
        check("BEARER   s3cret", Some("s3cret"));
        check("Bearer \ts3cret\t ", Some("s3cret"));
        check("Bearer ", Some(""));
        check("Bearer \u{a0}", Some("\u{a0}"));
        check("Bearer \u{3000}", Some("\u{3000}"));
        check("Bearer \u{85}", Some("\u{85}"));
        check("Bearer \u{a0}s3cret\u{3000}", Some("\u{a0}s3cret\u{3000}"));
        check("Bearer", None);
        check("Bearer\ts3cret", None);
        check("Basic s3cret", None);
        check("s3cret", None);
    }

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
        assert!(!constant_time_eq(b"", b"s3cret"));
    }
}
