//! How a report's verdicts read: the run's label, and for each policy whether it did what
//! the plan asked (every gate passed or, for a counterexample, the gates it named caught
//! it), word by word as every renderer shows it.

use super::model::{GateResult, PolicyReport, Report};

/// The failed-gates cell of the summary and the ranking: the names, `—` for none.
pub fn failed_gates_cell(names: &[String]) -> String {
    if names.is_empty() {
        "—".to_owned()
    } else {
        names.join(", ")
    }
}

impl Report {
    pub fn passed(&self) -> bool {
        self.verdict == "pass"
    }

    /// `PASS`, `FAIL`, `ABORTED` or `INCOMPLETE`, as every renderer shows it.
    pub fn verdict_label(&self) -> &'static str {
        if self.aborted {
            "ABORTED"
        } else if self.error.is_some() {
            "INCOMPLETE"
        } else if self.passed() {
            "PASS"
        } else {
            "FAIL"
        }
    }
}

impl PolicyReport {
    /// What the run's verdict asks of this policy: every gate passed or, for a
    /// counterexample, its gates caught it and no gate it does not name failed.
    pub fn as_expected(&self) -> bool {
        match &self.expect {
            None => self.gates.iter().all(|g| g.pass),
            Some(e) => e.met && self.unexpected_failures() == 0,
        }
    }

    /// Gates that failed though nothing expected them to: every failure of an ordinary
    /// policy; of a counterexample, those outside the gates it names.
    pub fn unexpected_failures(&self) -> usize {
        self.gates
            .iter()
            .filter(|g| !g.pass && !self.expects_failure(g))
            .count()
    }

    /// Whether `gate` is one this counterexample is expected to fail.
    pub fn expects_failure(&self, gate: &GateResult) -> bool {
        self.expect.as_ref().is_some_and(|e| {
            e.fail.is_empty()
                || e.fail
                    .iter()
                    .any(|n| crate::plan::Expect::names(n, &gate.name))
        })
    }

    /// A gate's result as every renderer words it: `pass`, `FAIL`, and for a
    /// counterexample `FAIL (expected)` or, for a gate it names that did not fire,
    /// `pass (expected FAIL)`.
    pub fn gate_word(&self, gate: &GateResult) -> &'static str {
        let named = self.expect.as_ref().is_some_and(|e| !e.fail.is_empty());
        match (gate.pass, self.expects_failure(gate)) {
            (true, true) if named => "pass (expected FAIL)",
            (true, _) => "pass",
            (false, true) => "FAIL (expected)",
            (false, false) => "FAIL",
        }
    }

    /// One line on a counterexample: what it was expected to fail, and whether it did.
    pub fn expectation_line(&self) -> Option<String> {
        let e = self.expect.as_ref()?;
        let wanted = if e.fail.is_empty() {
            "expect: fail".to_owned()
        } else {
            format!("expect: {{ fail: [{}] }}", e.fail.join(", "))
        };
        // A met expectation's detail already says "caught as expected".
        Some(if e.met {
            format!("Counterexample (`{wanted}`): {}", e.detail)
        } else {
            format!("Counterexample (`{wanted}`): NOT CAUGHT: {}", e.detail)
        })
    }

    /// The summary's gates cell: `pass 5/5`, `FAIL 3/5`, for a counterexample
    /// `FAIL 3/5 (expected)` or `NOT CAUGHT 5/5`.
    pub fn gates_cell(&self) -> String {
        let passed = self.gates.iter().filter(|g| g.pass).count();
        let n = self.gates.len();
        match (&self.expect, n) {
            (_, 0) => "–".to_owned(),
            (Some(e), _) if e.met && self.unexpected_failures() > 0 => format!(
                "FAIL {passed}/{n} ({} unexpected)",
                self.unexpected_failures()
            ),
            (Some(e), _) if e.met => format!("FAIL {passed}/{n} (expected)"),
            (Some(_), _) => format!("NOT CAUGHT {passed}/{n}"),
            (None, _) if passed == n => format!("pass {passed}/{n}"),
            (None, _) => format!("FAIL {passed}/{n}"),
        }
    }

    /// The names of the gates that failed, in the plan's order (a counterexample's
    /// expected failures among them).
    pub fn failed_gates(&self) -> Vec<String> {
        self.gates
            .iter()
            .filter(|g| !g.pass)
            .map(|g| g.name.clone())
            .collect()
    }

    /// The failed-gates cell of the summary and the sweep: the names of the gates that
    /// failed, `—` for none; for a counterexample, which failures it expected, and the
    /// gates it named that did not fail (why its verdict is `fail`).
    pub fn failed_gates_text(&self) -> String {
        let mut parts: Vec<String> = self
            .gates
            .iter()
            .filter_map(|g| match self.gate_word(g) {
                "pass" => None,
                "FAIL" => Some(g.name.clone()),
                "FAIL (expected)" => Some(format!("{} (expected)", g.name)),
                _ => Some(format!("{} passed (expected to fail)", g.name)),
            })
            .collect();
        let missed = |p: &String| p.ends_with("passed (expected to fail)");
        if self.expect.as_ref().is_some_and(|e| !e.met) && !parts.iter().any(missed) {
            parts.push("not caught (expected a gate to fail)".to_owned());
        }
        failed_gates_cell(&parts)
    }
}
