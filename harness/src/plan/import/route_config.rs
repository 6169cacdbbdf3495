//! The route an Envoy import reads when its file is a whole route configuration: a
//! `RouteConfiguration` (`virtual_hosts: [ { name, domains, routes: [...] } ]`), the
//! `route_config` of an HTTP connection manager around one, or one virtual host
//! (`{ name, domains, routes }`).
//!
//! Why: production keeps its routes in one file, and cutting one route out by hand loses
//! the virtual host's `retry_policy`, which Envoy applies to every route of the host that
//! has none of its own ("setting a route level entry will take precedence over this config
//! and it'll be treated independently (e.g.: values are not inherited)",
//! `route_components.proto`, `VirtualHost.retry_policy`). A configuration with one route
//! that retries needs no more; with several, the plan names one (`route:`), and an error
//! names the routes there are.

use serde_yaml::{Mapping, Value};

use super::{Problem, problem};

/// How many route names a hint lists; a configuration may hold thousands.
const HINT_NAMES: usize = 8;

/// The route an import reads: its route action (timeout, hedging), its retry policy (its
/// own or its virtual host's), and where the policy came from, for warnings.
pub(super) struct Chosen<'a> {
    pub(super) action: &'a Value,
    pub(super) route: &'a Value,
    pub(super) host: &'a Value,
    pub(super) policy: &'a Mapping,
}

/// One route of the configuration that forwards (has a route action).
struct Route<'a> {
    /// Its `name`, or its place (`catalog/routes[2]`) when it has none.
    label: String,
    /// `host/name`, to tell apart routes of the same name in two virtual hosts.
    qualified: String,
    /// `host/routes[i]`: a route by its place, named or not.
    place: String,
    action: &'a Value,
    route: &'a Value,
    host: &'a Value,
    /// Its own retry policy, else its virtual host's.
    policy: Option<&'a Mapping>,
}

impl<'a> Route<'a> {
    fn chosen(self) -> Option<Chosen<'a>> {
        Some(Chosen {
            action: self.action,
            route: self.route,
            host: self.host,
            policy: self.policy?,
        })
    }
}

fn get<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    map.as_mapping()?.get(key)
}

/// The virtual hosts of `root`, when it is a route configuration (or holds one, or is one
/// virtual host); `None` for a single route, a route action or a bare retry policy.
fn virtual_hosts(root: &Value) -> Result<Option<Vec<&Value>>, Problem> {
    let config = get(root, "route_config")
        .filter(|c| c.is_mapping())
        .unwrap_or(root);
    if let Some(hosts) = get(config, "virtual_hosts") {
        let hosts = hosts
            .as_sequence()
            .ok_or_else(|| problem("`virtual_hosts` is not a list"))?;
        return Ok(Some(hosts.iter().collect()));
    }
    if get(config, "routes").is_some_and(Value::is_sequence) {
        return Ok(Some(vec![config]));
    }
    Ok(None)
}

/// Every route that forwards, in the file's order.
fn routes<'a>(hosts: &[&'a Value]) -> Result<Vec<Route<'a>>, Problem> {
    let mut out = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        if !host.is_mapping() {
            return Err(problem(format!("`virtual_hosts[{i}]` is not a map")));
        }
        let host_name = get(host, "name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("virtual_hosts[{i}]"), str::to_owned);
        let host_policy = match get(host, "retry_policy") {
            None => None,
            Some(p) => Some(p.as_mapping().ok_or_else(|| {
                problem(format!(
                    "the `retry_policy` of virtual host `{host_name}` is not a map"
                ))
            })?),
        };
        let list = match get(host, "routes") {
            None => &[][..],
            Some(Value::Sequence(list)) => list.as_slice(),
            Some(_) => {
                return Err(problem(format!(
                    "the `routes` of virtual host `{host_name}` is not a list"
                )));
            }
        };
        for (j, route) in list.iter().enumerate() {
            // A redirect or a direct response forwards nothing, so nothing is retried.
            let Some(action) = get(route, "route").filter(|a| a.is_mapping()) else {
                continue;
            };
            let name = get(route, "name").and_then(Value::as_str);
            let policy = match get(action, "retry_policy") {
                Some(p) => Some(p.as_mapping().ok_or_else(|| {
                    problem(format!(
                        "the `retry_policy` of route `{}` is not a map",
                        name.unwrap_or("?")
                    ))
                })?),
                None => host_policy,
            };
            let place = format!("{host_name}/routes[{j}]");
            out.push(Route {
                label: name.map_or_else(|| place.clone(), str::to_owned),
                qualified: name.map_or_else(|| place.clone(), |n| format!("{host_name}/{n}")),
                place,
                action,
                route,
                host,
                policy,
            });
        }
    }
    Ok(out)
}

/// `names`, at most a handful, and how many more.
fn some(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(HINT_NAMES).map(String::as_str).collect();
    match names.len().saturating_sub(HINT_NAMES) {
        0 => shown.join(", "),
        n => format!("{} and {n} more", shown.join(", ")),
    }
}

/// The route `selected` names (by its name, `host/name`, or its place `host/routes[i]`),
/// or the one route with a retry policy; `None` when `root` is not a route configuration.
pub(super) fn choose<'a>(
    root: &'a Value,
    selected: Option<&str>,
) -> Result<Option<Chosen<'a>>, Problem> {
    let Some(hosts) = virtual_hosts(root)? else {
        return Ok(None);
    };
    let all = routes(&hosts)?;
    let retrying: Vec<String> = all
        .iter()
        .filter(|r| r.policy.is_some())
        .map(|r| r.label.clone())
        .collect();
    let which = "`import: { envoy_route: FILE, route: NAME }`";
    let Some(selected) = selected else {
        let routes = count_routes(&hosts);
        let mut retrying_routes = all.into_iter().filter_map(Route::chosen);
        return match (retrying_routes.next(), retrying_routes.next()) {
            (Some(only), None) => Ok(Some(only)),
            (None, _) => Err(problem(format!(
                "no route of the Envoy route configuration has a `retry_policy`, nor has its virtual host ({routes} route{} in {} virtual host{})",
                plural(routes),
                hosts.len(),
                plural(hosts.len())
            ))
            .hint("without one Envoy does not retry: give a configuration (or a route) with a `retry_policy`")),
            (Some(_), Some(_)) => Err(problem(format!(
                "the Envoy route configuration has {} routes with a retry policy: say which with `route:`",
                retrying.len()
            ))
            .hint(format!("{which}; its routes: {}", some(&retrying)))),
        };
    };
    // A name several routes share picks none of them: each is named by its host or place.
    let named: Vec<String> = all
        .iter()
        .filter(|r| r.label == selected)
        .map(|r| format!("{} ({})", r.qualified, r.place))
        .collect();
    let twice = named.len() > 1;
    if twice
        && all
            .iter()
            .all(|r| r.place != selected && r.qualified != selected)
    {
        return Err(
            problem(format!("{} routes are named `{selected}`", named.len())).hint(format!(
                "say which, by its virtual host or its place: {}",
                some(&named)
            )),
        );
    }
    let mut matching: Vec<Route<'_>> = all
        .into_iter()
        .filter(|r| {
            r.place == selected || r.qualified == selected || (!twice && r.label == selected)
        })
        .collect();
    if matching.len() > 1 {
        let places: Vec<String> = matching.iter().map(|r| r.place.clone()).collect();
        return Err(problem(format!(
            "{} routes of one virtual host are named `{selected}`",
            matching.len()
        ))
        .hint(format!("name one by its place: {}", some(&places))));
    }
    let Some(route) = matching.pop() else {
        return Err(problem(format!(
            "no route `{selected}` in the Envoy route configuration"
        ))
        .hint(if retrying.is_empty() {
            "none of its routes has a retry policy (nor their virtual hosts)".to_owned()
        } else {
            format!(
                "its routes with a retry policy: {} (a route by its place: HOST/routes[INDEX])",
                some(&retrying)
            )
        }));
    };
    let Some(chosen) = route.chosen() else {
        return Err(problem(format!(
            "route `{selected}` has no `retry_policy`, nor has its virtual host: Envoy does not retry it"
        ))
        .hint(if retrying.is_empty() {
            "model it without an import: `max_attempts: 1`".to_owned()
        } else {
            format!(
                "model it without an import (`max_attempts: 1`), or name a route that retries: {}",
                some(&retrying)
            )
        }));
    };
    Ok(Some(chosen))
}

fn count_routes(hosts: &[&Value]) -> usize {
    hosts
        .iter()
        .filter_map(|h| get(h, "routes").and_then(Value::as_sequence))
        .map(Vec::len)
        .sum()
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

    use std::time::Duration;

    use super::super::envoy::import;

    /// Two virtual hosts: `catalog` retries every route (its own policy, or the host's),
    /// `admin` forwards without retries and redirects.
    const CONFIG: &str = "
name: local_route
virtual_hosts:
  - name: catalog
    domains: ['catalog.internal']
    retry_policy: { retry_on: 5xx, num_retries: 4 }
    routes:
      - name: items
        match: { prefix: /items }
        route: { cluster: catalog, timeout: 2s, retry_policy: { retry_on: gateway-error, per_try_timeout: 0.3s } }
      - name: search
        match: { prefix: /search }
        route: { cluster: search, timeout: 1s }
      - match: { prefix: / }
        route: { cluster: catalog }
  - name: admin
    domains: ['*']
    routes:
      - name: stats
        match: { prefix: /stats }
        route: { cluster: admin }
      - name: old
        match: { prefix: /old }
        redirect: { path_redirect: /new }
";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_route_is_found_by_name_and_the_hosts_policy_applies_to_a_route_without_one() {
        // Its own policy wins whole: no `num_retries` is Envoy's default of 1, not the
        // host's 4 ("values are not inherited").
        let items = import(CONFIG, Some("items"), None).unwrap().config;
        assert_eq!(items.max_attempts, 2);
        assert_eq!(items.attempt_timeout, Some(ms(300)));
        assert_eq!(items.deadline, Some(ms(2000)));
        // The host's policy, the route's own timeout.
        let search = import(CONFIG, Some("catalog/search"), None).unwrap().config;
        assert_eq!(search.max_attempts, 5);
        assert_eq!(search.deadline, Some(ms(1000)));
        // A route without a name, by its place; Envoy's 15 s route timeout.
        let rest = import(CONFIG, Some("catalog/routes[2]"), None)
            .unwrap()
            .config;
        assert_eq!((rest.max_attempts, rest.deadline), (5, Some(ms(15_000))));
        // The connection manager's `route_config` around it reads the same.
        let wrapped = format!("route_config:\n{}", CONFIG.replace('\n', "\n  "));
        assert_eq!(import(&wrapped, Some("items"), None).unwrap().config, items);
    }

    #[test]
    fn the_one_route_that_retries_needs_no_name() {
        let one = "virtual_hosts:\n  - name: h\n    routes:\n      - { name: a, match: { prefix: /a }, route: { cluster: c } }\n      - { name: b, match: { prefix: /b }, route: { cluster: c, retry_policy: { num_retries: 2 } } }\n";
        assert_eq!(import(one, None, None).unwrap().config.max_attempts, 3);
        // One virtual host on its own.
        let host = "name: h\nroutes:\n  - { name: b, match: { prefix: / }, route: { cluster: c, retry_policy: { num_retries: 3 } } }\n";
        assert_eq!(import(host, None, None).unwrap().config.max_attempts, 4);
    }

    #[test]
    fn a_missing_or_wrong_route_name_says_which_routes_there_are() {
        let many = format!(
            "virtual_hosts:\n  - name: h\n    retry_policy: {{ num_retries: 1 }}\n    routes:\n{}",
            (0..20)
                .map(|i| format!(
                    "      - {{ name: r{i}, match: {{ prefix: /{i} }}, route: {{ cluster: c }} }}\n"
                ))
                .collect::<String>()
        );
        let twice = "virtual_hosts:\n  - { name: a, routes: [ { name: x, route: { cluster: c, retry_policy: {} } } ] }\n  - { name: b, routes: [ { name: x, route: { cluster: c, retry_policy: {} } }, { name: x, route: { cluster: c } } ] }\n";
        let cases = [
            (
                CONFIG,
                None,
                "the Envoy route configuration has 3 routes with a retry policy: say which with `route:`",
                "`import: { envoy_route: FILE, route: NAME }`; its routes: items, search, catalog/routes[2]",
            ),
            (
                &many,
                None,
                "the Envoy route configuration has 20 routes with a retry policy: say which with `route:`",
                "its routes: r0, r1, r2, r3, r4, r5, r6, r7 and 12 more",
            ),
            (
                CONFIG,
                Some("itmes"),
                "no route `itmes` in the Envoy route configuration",
                "its routes with a retry policy: items, search, catalog/routes[2] (a route by its place: HOST/routes[INDEX])",
            ),
            (
                CONFIG,
                Some("stats"),
                "route `stats` has no `retry_policy`, nor has its virtual host: Envoy does not retry it",
                "model it without an import (`max_attempts: 1`), or name a route that retries: items, search, catalog/routes[2]",
            ),
            (
                CONFIG,
                Some("old"),
                "no route `old` in the Envoy route configuration",
                "its routes with a retry policy",
            ),
            (
                "virtual_hosts: [ { name: h, routes: [ { name: a, route: { cluster: c } } ] } ]\n",
                None,
                "no route of the Envoy route configuration has a `retry_policy`, nor has its virtual host (1 route in 1 virtual host)",
                "without one Envoy does not retry",
            ),
            (
                twice,
                Some("x"),
                "3 routes are named `x`",
                "say which, by its virtual host or its place: a/x (a/routes[0]), b/x (b/routes[0]), b/x (b/routes[1])",
            ),
            (
                twice,
                Some("b/x"),
                "2 routes of one virtual host are named `b/x`",
                "name one by its place: b/routes[0], b/routes[1]",
            ),
            (
                "match: { prefix: / }\nroute: { cluster: c, retry_policy: {} }\n",
                Some("items"),
                "`route: items` picks a route of a route configuration, and this file is one route",
                "drop `route:`",
            ),
            (
                "virtual_hosts: { name: h }\n",
                None,
                "`virtual_hosts` is not a list",
                "",
            ),
        ];
        for (config, selected, message, hint) in cases {
            let problem = import(config, selected, None).expect_err(message);
            assert_eq!(problem.message, message, "{selected:?}");
            assert!(
                problem.hint.as_deref().unwrap_or_default().contains(hint),
                "{selected:?}: {:?}",
                problem.hint
            );
        }
        assert_eq!(
            import(twice, Some("a/x"), None)
                .unwrap()
                .config
                .max_attempts,
            2
        );
        assert_eq!(
            import(twice, Some("b/routes[0]"), None)
                .unwrap()
                .config
                .max_attempts,
            2
        );
    }
}
