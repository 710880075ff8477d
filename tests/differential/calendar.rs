//! Rust and Lua agree on calendar periods (`rate_limit.calendar`): the period bounds come
//! from `Calendar::period_at` (Rust, the one place they are computed) at the instance's
//! clock, which is off the server's by a random skew at each step (instances behind or
//! ahead of Redis, within and beyond the grace); `fixed_window::apply` with
//! `Params::period` and the scripts (`calendar_window.lua`, `joint.lua`, `batch.lua`, picked
//! at random per step, on one key) must answer and store the same. The sequences cross a
//! Europe/Berlin daylight-saving change (both ways), month ends in UTC and Berlin, and an
//! ISO week across a year end, two years ahead of the real clock (keys never expire in
//! Redis during the test).

use std::cell::{Cell, RefCell};

use jiff::civil::{date, Weekday};
use jiff::tz::TimeZone;
use jiff::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate::algorithm::{apply, Algorithm, Hits, Params, Write};
use tollgate::config::rule::{Calendar, Unit};
use tollgate::store::scripts::{BATCH_LUA, CALENDAR_LUA, JOINT_LUA};

use super::joint::stored_in_redis;
use super::redis_support::RedisServer;
use super::{as_i64, Kept};

const HOUR: u64 = 3_600_000_000;

/// Where a sequence starts: a calendar and an instant a little before a boundary.
#[derive(Debug, Clone, Copy)]
enum Scenario {
    BerlinSpringForwardDay,
    BerlinFallBackDay,
    UtcJanuaryEnd,
    UtcFebruaryEnd,
    BerlinMarchEnd,
    UtcWeekAcrossNewYear,
}

/// The year the sequences run in: two ahead of the real clock.
fn year() -> i16 {
    Timestamp::now().to_zoned(TimeZone::UTC).year() + 2
}

fn midnight(zone: &str, y: i16, m: i8, d: i8) -> u64 {
    let tz = TimeZone::get(zone).expect("zone");
    let at = date(y, m, d).to_zoned(tz).expect("midnight").timestamp();
    u64::try_from(at.as_microsecond()).expect("after 1970")
}

impl Scenario {
    fn calendar(self) -> Calendar {
        let (zone, unit) = match self {
            Scenario::BerlinSpringForwardDay | Scenario::BerlinFallBackDay => {
                (Some("Europe/Berlin"), Unit::Day)
            }
            Scenario::UtcJanuaryEnd | Scenario::UtcFebruaryEnd => (None, Unit::Month),
            Scenario::BerlinMarchEnd => (Some("Europe/Berlin"), Unit::Month),
            Scenario::UtcWeekAcrossNewYear => (None, Unit::Week),
        };
        Calendar::new(zone, unit).expect("a valid calendar")
    }

    /// Three hours before the boundary the scenario is about (the week: before the new year,
    /// inside the week that holds it).
    fn start(self) -> u64 {
        let y = year();
        let last_sunday = |m| date(y, m, 1).nth_weekday_of_month(-1, Weekday::Sunday).expect("a Sunday");
        let at = match self {
            Scenario::BerlinSpringForwardDay => {
                let d = last_sunday(3);
                midnight("Europe/Berlin", y, 3, d.day())
            }
            Scenario::BerlinFallBackDay => {
                let d = last_sunday(10);
                midnight("Europe/Berlin", y, 10, d.day())
            }
            Scenario::UtcJanuaryEnd => midnight("UTC", y, 2, 1),
            Scenario::UtcFebruaryEnd => midnight("UTC", y, 3, 1),
            Scenario::BerlinMarchEnd => midnight("Europe/Berlin", y, 4, 1),
            Scenario::UtcWeekAcrossNewYear => midnight("UTC", y, 1, 1),
        };
        at - 3 * HOUR
    }
}

/// How the server's clock moves before a step.
#[derive(Debug, Clone, Copy)]
enum Tick {
    Stay,
    Micros(u64),
    /// `permille / 1000` of an hour.
    Hours(u64),
    /// To the next boundary of the instance's period, plus `offset - 2` µs.
    Boundary(u64),
}

/// Which script charges a step.
#[derive(Debug, Clone, Copy)]
enum Via {
    Single,
    Joint,
    Batch,
}

type Step = (Tick, i64, Hits, Via);

fn arb_step() -> impl Strategy<Value = Step> {
    let tick = prop_oneof![
        3 => Just(Tick::Stay),
        3 => (1u64..1_000).prop_map(Tick::Micros),
        4 => (0u64..3_000).prop_map(Tick::Hours),
        3 => (0u64..5).prop_map(Tick::Boundary),
    ];
    // The instance's clock against the server's (µs): mostly equal, often a little off,
    // now and then past the grace.
    let skew = prop_oneof![
        4 => Just(0i64),
        3 => -2_000_000i64..2_000_000,
        1 => -120_000_000i64..120_000_000,
    ];
    let n = 1u64..6;
    let hits = prop_oneof![
        6 => n.clone().prop_map(Hits::Consume),
        2 => Just(Hits::Peek),
        1 => n.clone().prop_map(Hits::Refund),
        1 => n.prop_map(Hits::Overdraw),
    ];
    let via = prop_oneof![Just(Via::Single), Just(Via::Joint), Just(Via::Batch)];
    (tick, skew, hits, via)
}

fn arb_scenario() -> impl Strategy<Value = Scenario> {
    prop_oneof![
        Just(Scenario::BerlinSpringForwardDay),
        Just(Scenario::BerlinFallBackDay),
        Just(Scenario::UtcJanuaryEnd),
        Just(Scenario::UtcFebruaryEnd),
        Just(Scenario::BerlinMarchEnd),
        Just(Scenario::UtcWeekAcrossNewYear),
    ]
}

type Case = (Scenario, u64, Vec<Step>);

fn arb_case() -> impl Strategy<Value = Case> {
    (arb_scenario(), 0u64..12, prop::collection::vec(arb_step(), 1..60))
}

struct Shas {
    single: String,
    joint: String,
    batch: String,
}

fn load(con: &mut redis::Connection) -> Shas {
    let mut load = |source: &str| -> String {
        redis::cmd("SCRIPT").arg("LOAD").arg(source).query(con).expect("script loads")
    };
    Shas { single: load(CALENDAR_LUA), joint: load(JOINT_LUA), batch: load(BATCH_LUA) }
}

fn mode(hits: Hits) -> (u8, u64) {
    match hits {
        Hits::Consume(n) => (0, n),
        Hits::Peek => (1, 0),
        Hits::Refund(n) => (2, n),
        Hits::Overdraw(n) => (3, n),
    }
}

/// One charge through `via`, as the store sends it (`calendar_window`, the period's end in
/// place of `unit_us` and its start in place of `burst`), at the test clock `now`.
fn eval(
    con: &mut redis::Connection,
    shas: &Shas,
    via: Via,
    key: &str,
    p: &Params,
    hits: Hits,
    now: u64,
) -> redis::RedisResult<Vec<i64>> {
    let period = p.period.expect("a calendar charge");
    let (mode, n) = mode(hits);
    let (end, start) = (period.end_us, period.start_us);
    match via {
        Via::Single => redis::cmd("EVALSHA")
            .arg(&shas.single)
            .arg(1)
            .arg(key)
            .arg(p.limit)
            .arg(end)
            .arg(start)
            .arg(mode)
            .arg(n)
            .arg(now)
            .query(con),
        Via::Joint => {
            let reply: Vec<Vec<i64>> = redis::cmd("EVALSHA")
                .arg(&shas.joint)
                .arg(1)
                .arg(key)
                .arg(1)
                .arg(1)
                .arg("calendar_window")
                .arg(p.limit)
                .arg(end)
                .arg(start)
                .arg(mode)
                .arg(n)
                .arg(0)
                .arg(now)
                .query(con)?;
            Ok(reply.into_iter().next().unwrap_or_default())
        }
        Via::Batch => redis::cmd("EVALSHA")
            .arg(&shas.batch)
            .arg(1)
            .arg(key)
            .arg(now)
            .arg(1)
            .arg("calendar_window")
            .arg(p.limit)
            .arg(end)
            .arg(start)
            .arg(0)
            .arg("e")
            .arg(1)
            .arg(1)
            .arg(1)
            .arg(mode)
            .arg(n)
            .query(con),
    }
}

fn run_case(
    con: &mut redis::Connection,
    shas: &Shas,
    key: &str,
    (scenario, limit, steps): Case,
) -> Result<(), TestCaseError> {
    let calendar = scenario.calendar();
    let mut now = scenario.start();
    let mut stored: Kept = None;
    for (i, (tick, skew, hits, via)) in steps.into_iter().enumerate() {
        let before = calendar.period_at(now);
        now += match tick {
            Tick::Stay => 0,
            Tick::Micros(us) => us,
            Tick::Hours(permille) => HOUR * permille / 1000,
            Tick::Boundary(offset) => (before.end_us - now + offset).saturating_sub(2),
        };
        // The instance computes the period from its own clock.
        let instance = now.saturating_add_signed(skew);
        let p = Params {
            algorithm: Algorithm::FixedWindow,
            limit,
            unit_us: calendar.unit().micros(),
            burst: limit,
            penalty_us: 0,
            period: Some(calendar.period_at(instance)),
        };
        if stored.is_some_and(|(_, expires_at)| now >= expires_at) {
            stored = None;
        }
        let out = apply(stored.map(|(s, _)| s), now, &p, hits);
        match out.write {
            Write::Keep => {}
            Write::Delete => stored = None,
            Write::Put { state, expires_at } => stored = Some((state, expires_at)),
        }
        let d = out.decision;
        let rust = vec![i64::from(d.allowed), as_i64(d.remaining), as_i64(d.reset_us)];
        let lua = eval(con, shas, via, key, &p, hits, now)
            .map_err(|e| TestCaseError::fail(format!("step {i}: script failed: {e}")))?;
        prop_assert_eq!(
            &rust,
            &lua,
            "step {} via {:?} at {} (period {:?}) {:?}",
            i,
            via,
            now,
            p.period,
            hits
        );
        if let Some((state, expires_at)) = stored {
            stored_in_redis(con, key, state)?;
            let at: i64 = redis::cmd("PEXPIRETIME")
                .arg(key)
                .query(con)
                .map_err(|e| TestCaseError::fail(format!("PEXPIRETIME: {e}")))?;
            prop_assert_eq!(at, as_i64(expires_at.div_ceil(1000)), "step {} expiry", i);
        }
    }
    Ok(())
}

#[test]
fn calendar_windows_rust_and_lua_agree_across_dst_and_month_ends() {
    let server = RedisServer::start();
    let con = RefCell::new(server.client());
    let shas = load(&mut con.borrow_mut());
    let serial = Cell::new(0u64);
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let result = runner.run(&arb_case(), |case| {
        serial.set(serial.get() + 1);
        let key = format!("diff:calendar:{}", serial.get());
        run_case(&mut con.borrow_mut(), &shas, &key, case)
    });
    if let Err(e) = result {
        panic!("calendar windows differ from the scripts: {e}");
    }
}

/// Every scenario's boundary is crossed by a straight walk: the sequences above do test
/// what they claim (a DST day is 23 or 25 hours, the months end where the calendar says).
#[test]
fn the_scenarios_cross_their_boundaries() {
    for scenario in [
        Scenario::BerlinSpringForwardDay,
        Scenario::BerlinFallBackDay,
        Scenario::UtcJanuaryEnd,
        Scenario::UtcFebruaryEnd,
        Scenario::BerlinMarchEnd,
        Scenario::UtcWeekAcrossNewYear,
    ] {
        let calendar = scenario.calendar();
        let first = calendar.period_at(scenario.start());
        if let Scenario::UtcWeekAcrossNewYear = scenario {
            // The ISO week that holds the new year begins in the old one.
            let new_year = scenario.start() + 3 * HOUR;
            assert!(first.start_us < new_year && new_year < first.end_us);
            assert_eq!(first.end_us - first.start_us, 7 * 24 * HOUR);
            continue;
        }
        let next = calendar.period_at(first.end_us);
        assert_eq!(first.end_us, scenario.start() + 3 * HOUR, "{scenario:?}");
        let len = next.end_us - next.start_us;
        match scenario {
            Scenario::BerlinSpringForwardDay => assert_eq!(len, 23 * HOUR),
            Scenario::BerlinFallBackDay => assert_eq!(len, 25 * HOUR),
            Scenario::BerlinMarchEnd => assert_eq!(len, 30 * 24 * HOUR, "Berlin's April"),
            Scenario::UtcJanuaryEnd => assert!(len == 28 * 24 * HOUR || len == 29 * 24 * HOUR),
            _ => {}
        }
    }
}
