//! A running fault-server's control API, as a run uses it: recognise it, read the script in
//! force and where it came from, install the plan's, reset, read the ledger.
//!
//! Why the care before the first script: the target may be a service of the user's own
//! (they forgot `fault_server: false`), which must get no request the plan did not ask for
//! beyond one `GET /healthz`; or a fault-server someone started with a script of their own
//! (a brownout, a capacity limit), which a plan with no faults would otherwise replace
//! silently and then pass against: a false green. So the harness recognises a fault-server
//! by its `/healthz` answer ([`wire::SERVER`]), and replaces a script it did not install
//! itself only when the plan says so ([`ScriptConsent`]).

use std::time::Duration;

use fault_server::ScriptSpec;
use fault_server::ledger::LedgerSnapshot;
use fault_server::wire;

use crate::plan::spec::ScriptConsent;

/// Why a running fault-server's control API did not serve the run.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("target {url} is unreachable: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("the fault-server at {url} refused {what}: {detail}")]
    Refused {
        url: String,
        what: &'static str,
        detail: String,
    },
    #[error(
        "{url} is not a fault-server: its /healthz answered {answer} without `x-chaos-server`, so no script was sent; if it is a service of your own, say so under `target:` (`fault_server: false`: a black box, sent only the plan's requests and counted by the client)"
    )]
    NotAFaultServer { url: String, answer: String },
    #[error(
        "the fault-server at {url} has a script the harness did not install ({origin}: {script}), and the plan's would replace it: say under `target:` `script: replace` to run the plan's (the server's is put back after the run) or `script: keep` to run against the server's own"
    )]
    ScriptInForce {
        url: String,
        script: String,
        origin: String,
    },
}

/// A running fault-server, as its control API is called.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remote<'a> {
    pub(crate) client: &'a reqwest::Client,
    pub(crate) url: &'a str,
    pub(crate) token: Option<&'a str>,
}

/// The script a fault-server had before the run, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InForce {
    pub(crate) spec: ScriptSpec,
    /// [`wire::ORIGIN_STARTUP`], [`wire::ORIGIN_HARNESS`], [`wire::ORIGIN_CONTROL`].
    pub(crate) origin: String,
}

impl InForce {
    /// Faults or a capacity model: a script that changes what the server does.
    pub(crate) fn does_something(&self) -> bool {
        !self.spec.faults.is_empty() || self.spec.server.is_some()
    }

    /// Its phases and capacity, in a few words.
    pub(crate) fn describe(&self) -> String {
        let names = self.spec.phase_names();
        let mut words = match names.len() {
            0 => "no fault phases".to_owned(),
            _ => format!(
                "fault phases {}",
                fault_server::script::listed_names(&names)
            ),
        };
        if let Some(server) = &self.spec.server {
            words.push_str(&format!(
                ", a capacity model ({})",
                serde_json::to_string(server).unwrap_or_default()
            ));
        }
        words
    }
}

/// What a run does about the script in force, once the plan has had its say.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Install the plan's script (the server has none of its own, or one this or an
    /// earlier harness run installed, or the same as the plan's), and put this one back
    /// after the run: a standalone server, a proxy in front of a real service above all,
    /// must not keep failing real traffic with the plan's faults once the run is over.
    Install(InForce),
    /// Install the plan's, and put this one back after the run (`script: replace`).
    Replace(InForce),
    /// Run against the server's own script (`script: keep`).
    Keep(InForce),
}

/// Decides, from what the server has and what the plan says. An `Err` is the refusal:
/// the server has a script of someone else's, and the plan did not say what to do.
pub(crate) fn decide(
    in_force: InForce,
    plan: &ScriptSpec,
    consent: Option<ScriptConsent>,
    url: &str,
) -> Result<Decision, ControlError> {
    let ours = in_force.origin == wire::ORIGIN_HARNESS;
    let same = in_force.spec.faults == plan.faults && in_force.spec.server == plan.server;
    match consent {
        Some(ScriptConsent::Keep) => Ok(Decision::Keep(in_force)),
        _ if ours || same || !in_force.does_something() => Ok(Decision::Install(in_force)),
        Some(ScriptConsent::Replace) => Ok(Decision::Replace(in_force)),
        None => Err(ControlError::ScriptInForce {
            url: url.to_owned(),
            script: in_force.describe(),
            origin: in_force.origin,
        }),
    }
}

impl Remote<'_> {
    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.token {
            Some(t) => request.bearer_auth(t),
            None => request,
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> ControlError {
        ControlError::Unreachable {
            url: self.url.to_owned(),
            detail: crate::attempt::classify(e).to_string(),
        }
    }

    /// `GET /healthz`, and nothing else, until the answer says a fault-server gave it.
    pub(crate) async fn recognise(&self) -> Result<(), ControlError> {
        let response = self
            .client
            .get(format!("{}/healthz", self.url))
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let name = response
            .headers()
            .get(wire::SERVER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if name.starts_with("fault-server") {
            return Ok(());
        }
        Err(ControlError::NotAFaultServer {
            url: self.url.to_owned(),
            answer: response.status().to_string(),
        })
    }

    /// The script in force and its origin.
    pub(crate) async fn in_force(&self) -> Result<InForce, ControlError> {
        let fail = |detail: String| ControlError::Refused {
            url: self.url.to_owned(),
            what: "its script",
            detail,
        };
        let response = self
            .authorized(self.client.get(format!("{}/__chaos/script", self.url)))
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        let origin = response
            .headers()
            .get(wire::SCRIPT_ORIGIN)
            .and_then(|v| v.to_str().ok())
            // A fault-server from before origins were kept: nobody can say it is ours.
            .unwrap_or(wire::ORIGIN_CONTROL)
            .to_owned();
        let text = response.text().await.map_err(|e| fail(e.to_string()))?;
        if !status.is_success() {
            return Err(fail(format!("{status}: {}", text.trim())));
        }
        let spec = serde_json::from_str(&text).map_err(|e| fail(format!("not a script: {e}")))?;
        Ok(InForce { spec, origin })
    }

    /// Installs `spec`, marked as the harness's.
    pub(crate) async fn install(&self, spec: &ScriptSpec) -> Result<(), ControlError> {
        self.put_script(spec, true, "the script").await
    }

    /// Puts back a script that was there before the run, as it was: marked as the
    /// harness's only if it was, so a later run asks again before replacing anyone
    /// else's.
    pub(crate) async fn restore(&self, in_force: &InForce) -> Result<(), ControlError> {
        let ours = in_force.origin == wire::ORIGIN_HARNESS;
        self.put_script(&in_force.spec, ours, "its script back")
            .await
    }

    /// `PUT /__chaos/script` of `spec`, marked as the harness's when `ours`.
    async fn put_script(
        &self,
        spec: &ScriptSpec,
        ours: bool,
        what: &'static str,
    ) -> Result<(), ControlError> {
        let body = serde_json::to_string(spec).expect("a script spec always serialises");
        let mut request = self
            .client
            .put(format!("{}/__chaos/script", self.url))
            .header("content-type", "application/json")
            .body(body);
        if ours {
            request = request.header(wire::SCRIPT_BY, wire::ORIGIN_HARNESS);
        }
        self.call(what, request).await
    }

    /// An empty ledger and the script's clock restarted.
    pub(crate) async fn reset(&self) -> Result<(), ControlError> {
        self.reset_clock_in(Duration::ZERO).await
    }

    /// Clears the ledger now and starts the server's run clock `delay` from now.
    pub(crate) async fn reset_clock_in(&self, delay: Duration) -> Result<(), ControlError> {
        let request = self.client.post(format!(
            "{}/__chaos/reset?{}={}",
            self.url,
            wire::RESET_CLOCK_IN,
            delay.as_millis()
        ));
        self.call("the reset", request).await
    }

    async fn call(
        &self,
        what: &'static str,
        request: reqwest::RequestBuilder,
    ) -> Result<(), ControlError> {
        let response = self
            .authorized(request)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        if response.status().is_success() {
            return Ok(());
        }
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        Err(ControlError::Refused {
            url: self.url.to_owned(),
            what,
            detail: format!("{status}: {}", text.trim()),
        })
    }

    pub(crate) async fn ledger(&self) -> Result<LedgerSnapshot, ControlError> {
        let fail = |detail: String| ControlError::Refused {
            url: self.url.to_owned(),
            what: "the ledger",
            detail,
        };
        let response = self
            .authorized(self.client.get(format!("{}/__chaos/ledger", self.url)))
            .send()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let text = response.text().await.map_err(|e| fail(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| fail(format!("not a ledger: {e}")))
    }

    /// `fault_server_in_flight` from `/metrics`.
    pub(crate) async fn in_flight(&self) -> Option<u64> {
        let text = self
            .client
            .get(format!("{}/metrics", self.url))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("fault_server_in_flight "))
            .and_then(|v| v.trim().parse().ok())
    }
}
