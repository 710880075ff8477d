//! The soak's policies: one domain per thing checked, every one `failure_mode: closed`, so
//! that every OK a client sees was decided by the store (a failure-policy answer is a
//! denial), and the limits each invariant checks against.

use std::path::Path;

use crate::plan::Reload;

/// The per-second limit of the window domains (`soak_fixed`, `soak_sliding`, `soak_aon`,
/// `soak_switch`) and the GCRA rate and burst of `soak_gcra`.
pub const PER_SECOND: u64 = 20;
/// `soak_fixed`'s limit while a `LimitChanged` reload is in force.
pub const RAISED: u64 = 30;
/// `soak_lease`: GCRA, leased.
pub const LEASE_PER_SECOND: u64 = 50;
/// `soak_multi`: two fixed windows on one key.
pub const MULTI_SECOND: u64 = 10;
pub const MULTI_MINUTE: u64 = 150;
/// `soak_approx`: approximate, fixed window.
pub const APPROX_PER_SECOND: u64 = 40;
/// `--lease-time-ms` default.
pub const LEASE_TIME_MS: u64 = 100;
/// `soak_budget_gcra` (GCRA) and `soak_budget_fixed` (fixed window): `overdraft: true`.
pub const BUDGET_PER_SECOND: u64 = 20;
/// `soak_penalty`: a fixed window whose breach denies for [`PENALTY_SECONDS`].
pub const PENALTY_PER_SECOND: u64 = 10;
pub const PENALTY_SECONDS: u64 = 3;
/// The penalty a `PenaltyAdded` reload puts on `soak_sliding`.
pub const ADDED_PENALTY_SECONDS: u64 = 2;
/// `soak_minute` (exact) and `soak_approx_minute` (approximate): fixed windows of a minute,
/// long enough for a reset or a peek to be seen within one window.
pub const PER_MINUTE: u64 = 50;
/// `--sync-interval-ms` default.
pub const SYNC_INTERVAL_MS: u64 = 250;

/// The policy files as they stand with these reloads in force.
pub fn files(toggles: Toggles) -> Vec<(&'static str, String)> {
    let Toggles { limit_changed, rule_added, switched, penalty_added } = toggles;
    let fixed_limit = if limit_changed { RAISED } else { PER_SECOND };
    let extra_rule = if rule_added {
        "\n  - key: extra\n    rate_limit: { unit: second, requests_per_unit: 5, algorithm: fixed_window }"
    } else {
        ""
    };
    let switch_mode = if switched { "approximate" } else { "exact" };
    let sliding_penalty =
        if penalty_added { format!(", penalty: {ADDED_PENALTY_SECONDS}s") } else { String::new() };
    let one = |domain: &str, head: &str, limit: String| {
        format!("domain: {domain}\nfailure_mode: closed\n{head}descriptors:\n  - key: k\n    {limit}\n")
    };
    vec![
        ("gcra.yaml", one("soak_gcra", "", format!("rate_limit: {{ unit: second, requests_per_unit: {PER_SECOND}, algorithm: gcra }}"))),
        ("sliding.yaml", one("soak_sliding", "", format!("rate_limit: {{ unit: second, requests_per_unit: {PER_SECOND}, algorithm: sliding_window{sliding_penalty} }}"))),
        (
            "fixed.yaml",
            one("soak_fixed", "", format!("rate_limit: {{ unit: second, requests_per_unit: {fixed_limit}, algorithm: fixed_window }}"))
                .trim_end()
                .to_string()
                + extra_rule
                + "\n",
        ),
        (
            "multi.yaml",
            one(
                "soak_multi",
                "",
                format!(
                    "rate_limits:\n      - {{ name: s, unit: second, requests_per_unit: {MULTI_SECOND}, algorithm: fixed_window }}\n      - {{ name: m, unit: minute, requests_per_unit: {MULTI_MINUTE}, algorithm: fixed_window }}"
                ),
            ),
        ),
        (
            "aon.yaml",
            format!(
                "domain: soak_aon\nfailure_mode: closed\ncharge: all_or_nothing\ndescriptors:\n  - key: a\n    rate_limit: {{ unit: second, requests_per_unit: {PER_SECOND}, algorithm: fixed_window }}\n  - key: b\n    rate_limit: {{ unit: second, requests_per_unit: {PER_SECOND}, algorithm: fixed_window }}\n"
            ),
        ),
        ("lease.yaml", one("soak_lease", "", format!("lease: true\n    rate_limit: {{ unit: second, requests_per_unit: {LEASE_PER_SECOND}, algorithm: gcra }}"))),
        ("approx.yaml", one("soak_approx", "consistency: approximate\n", format!("rate_limit: {{ unit: second, requests_per_unit: {APPROX_PER_SECOND}, algorithm: fixed_window }}"))),
        (
            "switch.yaml",
            one("soak_switch", &format!("consistency: {switch_mode}\n"), format!("rate_limit: {{ unit: second, requests_per_unit: {PER_SECOND}, algorithm: fixed_window }}")),
        ),
        ("budget_gcra.yaml", one("soak_budget_gcra", "", format!("rate_limit: {{ unit: second, requests_per_unit: {BUDGET_PER_SECOND}, algorithm: gcra, overdraft: true }}"))),
        ("budget_fixed.yaml", one("soak_budget_fixed", "", format!("rate_limit: {{ unit: second, requests_per_unit: {BUDGET_PER_SECOND}, algorithm: fixed_window, overdraft: true }}"))),
        ("penalty.yaml", one("soak_penalty", "", format!("rate_limit: {{ unit: second, requests_per_unit: {PENALTY_PER_SECOND}, algorithm: fixed_window, penalty: {PENALTY_SECONDS}s }}"))),
        ("minute.yaml", one("soak_minute", "", format!("rate_limit: {{ unit: minute, requests_per_unit: {PER_MINUTE}, algorithm: fixed_window }}"))),
        ("approx_minute.yaml", one("soak_approx_minute", "consistency: approximate\n", format!("rate_limit: {{ unit: minute, requests_per_unit: {PER_MINUTE}, algorithm: fixed_window }}"))),
        // Denies everything: an OK is an override's (`/v1/override`).
        ("incident.yaml", one("soak_incident", "", "rate_limit: { unit: second, requests_per_unit: 0, algorithm: fixed_window }".into())),
        ("count.yaml", one("soak_count", "", "rate_limit: { unit: hour, requests_per_unit: 1000000000, algorithm: fixed_window }".into())),
        ("canary.yaml", one("soak_canary", "", "rate_limit: { unit: hour, requests_per_unit: 1000000000, algorithm: fixed_window }".into())),
    ]
}

/// Which reloads are in force: each draw of a kind flips it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Toggles {
    pub limit_changed: bool,
    pub rule_added: bool,
    pub switched: bool,
    pub penalty_added: bool,
}

impl Toggles {
    pub fn flip(&mut self, reload: Reload) {
        match reload {
            Reload::LimitChanged => self.limit_changed = !self.limit_changed,
            Reload::RuleAdded => self.rule_added = !self.rule_added,
            Reload::Switched => self.switched = !self.switched,
            Reload::PenaltyAdded => self.penalty_added = !self.penalty_added,
        }
    }
}

/// Writes every policy file into `dir`, each by a rename (a reload never reads half a file).
pub fn write(dir: &Path, toggles: Toggles) {
    for (name, text) in files(toggles) {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
            continue;
        }
        let tmp = dir.parent().expect("the policy dir has a parent").join(format!("{name}.tmp"));
        std::fs::write(&tmp, &text).expect("write a policy");
        std::fs::rename(&tmp, &path).expect("rename a policy");
    }
}
