//! One soak run: starts the store and the instances into the clients' traffic, walks the
//! schedule (and a planted violation, if asked), stops everything, and returns the log the
//! verdicts are drawn from.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::fleet::Instance;
use crate::load::{self, now_us, Call, Canary};
use crate::plan::{Fault, Plan, Plant, Step};
use crate::policies::{self, Toggles};
use crate::stores::{signal, Stores};
use crate::watch::{self, Sample};

/// A fault as it happened.
#[derive(Clone, Debug)]
pub struct Happened {
    pub fault: Fault,
    pub start: u64,
    /// When it healed: the store answers again, the instance is ready again.
    pub heal: u64,
    pub data_loss: bool,
    pub note: String,
}

/// A reload: when the files were written, and the toggles in force before and after.
#[derive(Clone, Copy, Debug)]
pub struct Reloaded {
    pub at: u64,
    pub before: Toggles,
    pub after: Toggles,
}

/// Everything a run saw.
pub struct RunLog {
    pub plan: Plan,
    pub start: u64,
    /// All instances first ready.
    pub ready: u64,
    pub end: u64,
    pub faults: Vec<Happened>,
    pub reloads: Vec<Reloaded>,
    pub calls: Vec<Call>,
    pub canaries: Vec<Canary>,
    pub samples: Vec<Sample>,
    /// `(key, count)` of every `soak_count` bucket, read from Redis once its epoch ended.
    pub counts: Vec<(String, u64)>,
    /// When each epoch's counts were read (µs since the Unix epoch).
    pub count_reads: std::collections::HashMap<u64, CountRead>,
    /// Each instance's stderr.
    pub logs: Vec<String>,
    pub instances: usize,
    /// What the operators did (`ops.rs`).
    pub ops: crate::ops::OpsLog,
}

/// Runs `plan` to the end.
pub fn run(plan: Plan) -> RunLog {
    let dir = tempfile::Builder::new().prefix("tollgate-soak-").tempdir().expect("tempdir");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("config dir");
    policies::write(&config, Toggles::default());
    let mut stores = Stores::start(plan.topology, plan.instances);
    let mut instances: Vec<Instance> = (0..plan.instances)
        .map(|i| Instance::new(i, &stores.tollgate_args(i), &config, dir.path()))
        .collect();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let start = now_us();
    let addrs: Vec<(SocketAddr, SocketAddr)> = instances.iter().map(|i| (i.grpc, i.admin)).collect();

    let mut clients = Vec::new();
    let mut canaries = Vec::new();
    let mut probes = Vec::new();
    for (i, (grpc, admin)) in addrs.iter().copied().enumerate() {
        for c in 0..load::CLIENTS_PER_INSTANCE {
            let seed = plan.seed.wrapping_mul(1_000).wrapping_add((i * 10 + c) as u64);
            let client = i * load::CLIENTS_PER_INSTANCE + c;
            clients.push(runtime.spawn(load::run_client(seed, client, i, grpc, start, stop.clone())));
        }
        canaries.push(runtime.spawn(load::run_canary(i, grpc, instances[i].live.clone(), stop.clone())));
        probes.push(runtime.spawn(watch::run_probe(i, grpc, admin, instances[i].live.clone(), stop.clone())));
    }

    let reader = {
        let (view, stop) = (stores.view(), stop.clone());
        std::thread::spawn(move || read_epochs(&view, start, &stop, 0))
    };

    // Instances start into the clients' traffic.
    for instance in &mut instances {
        assert!(instance.start(), "instance not ready within 20 s:\n{}", instance.log_text());
    }
    let ready = now_us();
    let operators = crate::ops::Operators {
        seed: plan.seed,
        addrs: addrs.clone(),
        fronts: stores.instance_fronts(),
        plant: plan.plant,
        view: stores.view(),
    };
    let ops = {
        let (handle, stop) = (runtime.handle().clone(), stop.clone());
        std::thread::spawn(move || crate::ops::run(operators, handle, stop))
    };
    let mut faults = Vec::new();
    let mut reloads = Vec::new();
    let mut toggles = Toggles::default();
    let end_at = start + plan.run.as_micros() as u64;
    for step in plan.steps.clone() {
        std::thread::sleep(step.gap);
        let happened = apply(&mut stores, &mut instances, &config, &mut toggles, &mut reloads, step);
        println!(
            "  {:>6.1} s  {:<15} {}",
            (happened.start - start) as f64 / 1e6,
            happened.fault.kind(),
            happened.note
        );
        faults.push(happened);
        // Recovery runs on its own before the next gap starts (the plan counted it).
        std::thread::sleep(step.fault.recovery().max(Duration::from_secs(2)));
    }
    if let Some(plant) = plan.plant {
        sleep_until(start + plan.run.as_micros() as u64 * 2 / 5);
        plant_violation(plant, &mut stores, &instances, &mut faults);
    }
    sleep_until(end_at);
    stop.store(true, Ordering::SeqCst);
    let end = now_us();
    let ops = ops.join().expect("the operators");
    faults.extend(ops.cuts.iter().cloned());
    faults.sort_by_key(|f| f.start);
    let calls: Vec<Call> = runtime.block_on(futures_join(clients));
    let canaries: Vec<Canary> = runtime.block_on(futures_join(canaries));
    let samples: Vec<Sample> = runtime.block_on(futures_join(probes));
    let (mut counts, mut count_reads, next) = reader.join().expect("the count reader");
    // The epochs not read yet, the clients stopped.
    let (rest, rest_reads, _) = read_epochs(&stores.view(), start, &AtomicBool::new(true), next);
    counts.extend(rest);
    count_reads.extend(rest_reads);
    reread_during_faults(&stores.view(), &mut counts, &count_reads, &faults);
    let logs: Vec<String> = instances.iter().map(Instance::log_text).collect();
    // Kept after the run for a look: target/tmp/soak/<topology>-<seed>/.
    let kept = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("soak").join(format!(
        "{}-{}",
        plan.topology.name(),
        plan.seed
    ));
    if std::fs::create_dir_all(&kept).is_ok() {
        for (i, text) in logs.iter().enumerate() {
            let _ = std::fs::write(kept.join(format!("tollgate-{i}.log")), text);
        }
    }
    drop(instances);
    drop(stores);
    RunLog {
        instances: plan.instances,
        plan,
        start,
        ready,
        end,
        faults,
        reloads,
        calls,
        canaries,
        samples,
        counts,
        count_reads,
        logs,
        ops,
    }
}

/// When one epoch's counts were read (µs since the Unix epoch): the read was sent at
/// `started` and answered by `done`. Redis ran it in between, so a charge answered before
/// `started` is in it, and a data-losing fault that began before `done` may have emptied
/// it (found by the soak: a read sent during a freeze, its connection's SYN dropped by the
/// full accept queue, answered 12 s later, after Redis was killed and restarted empty).
#[derive(Debug, Clone, Copy)]
pub struct CountRead {
    pub started: u64,
    pub done: u64,
}

/// Reads the counts of each `soak_count` epoch from `first` on, 1.5 s after it ended (its
/// calls answered or timed out), until `stop`; then every epoch begun. Reading during the
/// run keeps an epoch comparable when Redis loses data later. The counts, when each epoch
/// was read, and the next epoch not read.
fn read_epochs(
    view: &crate::stores::Masters,
    start: u64,
    stop: &AtomicBool,
    first: u64,
) -> (Vec<(String, u64)>, std::collections::HashMap<u64, CountRead>, u64) {
    let (mut counts, mut reads, mut next) = (Vec::new(), std::collections::HashMap::new(), first);
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let epoch_us = load::COUNT_EPOCH_US;
        while start + (next + 1) * epoch_us + 1_500_000 <= now_us()
            || (stopping && start + next * epoch_us <= now_us())
        {
            let started = now_us();
            counts.extend(view.counts(&format!("cnt-e{next}-")));
            reads.insert(next, CountRead { started, done: now_us() });
            next += 1;
        }
        if stopping {
            return (counts, reads, next);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Reads again, now, the epochs whose read overlapped a store fault: a read in the middle of
/// a failover can miss a master's keys on every node (found by the soak: one epoch's eight
/// keys read 0 during a `CLUSTER FAILOVER`). An epoch's keys are charged only within its
/// 3 s, and a count only grows within its hour, so the larger of the two reads is kept.
fn reread_during_faults(
    view: &crate::stores::Masters,
    counts: &mut Vec<(String, u64)>,
    reads: &std::collections::HashMap<u64, CountRead>,
    faults: &[Happened],
) {
    let overlapped = |r: &CountRead| {
        faults
            .iter()
            .any(|f| f.fault.is_store_fault() && f.start <= r.done && f.heal + 1_000_000 >= r.started)
    };
    for (epoch, _) in reads.iter().filter(|(_, r)| overlapped(r)) {
        let again: std::collections::HashMap<String, u64> =
            view.counts(&format!("cnt-e{epoch}-")).into_iter().collect();
        for (key, count) in counts.iter_mut() {
            if let Some(&later) = again.get(key) {
                *count = (*count).max(later);
            }
        }
        let known: std::collections::HashSet<String> = counts.iter().map(|(k, _)| k.clone()).collect();
        counts.extend(again.into_iter().filter(|(k, _)| !known.contains(k)));
    }
}

async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<Vec<T>>>) -> Vec<T> {
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.expect("a soak task panicked"));
    }
    all
}

fn sleep_until(at_us: u64) {
    let now = now_us();
    if at_us > now {
        std::thread::sleep(Duration::from_micros(at_us - now));
    }
}

fn apply(
    stores: &mut Stores,
    instances: &mut [Instance],
    config: &std::path::Path,
    toggles: &mut Toggles,
    reloads: &mut Vec<Reloaded>,
    step: Step,
) -> Happened {
    let start = now_us();
    let (data_loss, note) = match step.fault {
        Fault::KillInstance { instance } => {
            let target = &mut instances[instance % instances.len()];
            target.kill();
            std::thread::sleep(step.hold);
            let ready = target.start();
            (false, format!("instance {instance} killed, ready again: {ready}"))
        }
        Fault::DrainInstance { instance } => {
            let target = &mut instances[instance % instances.len()];
            let clean = target.drain(Duration::from_secs(15));
            let ready = target.start();
            (false, format!("instance {instance} drained (exit 0: {clean}), ready again: {ready}"))
        }
        Fault::Reload(reload) => {
            let before = *toggles;
            toggles.flip(reload);
            policies::write(config, *toggles);
            reloads.push(Reloaded { at: start, before, after: *toggles });
            (false, format!("{toggles:?}"))
        }
        fault => {
            let applied = stores.apply(fault, step.hold);
            (applied.data_loss, applied.note)
        }
    };
    Happened { fault: step.fault, start, heal: now_us(), data_loss, note }
}

/// Plants one violation the verdicts must report (see `Plant`).
fn plant_violation(plant: Plant, stores: &mut Stores, instances: &[Instance], faults: &mut Vec<Happened>) {
    let master = stores.masters()[0];
    match plant {
        Plant::OverLimit => {
            for _ in 0..30 {
                for port in stores.masters() {
                    for key in crate::stores::cli(port, &["--scan", "--pattern", "*soak_fixed*"]).lines() {
                        crate::stores::cli(port, &["DEL", key]);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Plant::UndeclaredFreeze => {
            let pid = stores.pid_of(master);
            signal(pid, "STOP");
            std::thread::sleep(Duration::from_secs(2));
            signal(pid, "CONT");
        }
        Plant::SlowRecovery => {
            let pid = stores.pid_of(master);
            let start = now_us();
            signal(pid, "STOP");
            std::thread::sleep(Duration::from_millis(500));
            let heal = now_us();
            std::thread::sleep(Duration::from_secs(6));
            signal(pid, "CONT");
            faults.push(Happened {
                fault: Fault::Freeze { master: 0 },
                start,
                heal,
                data_loss: false,
                note: "planted: recorded healed 6 s early".into(),
            });
        }
        Plant::Wedged => {
            let pid = instances[0].live.pid.load(Ordering::SeqCst);
            signal(pid, "STOP");
            std::thread::sleep(Duration::from_secs(3));
            signal(pid, "CONT");
        }
        Plant::DoubleCharge => {
            // One charge more on every counted bucket there is now, written by no client.
            for port in stores.masters() {
                for key in crate::stores::cli(port, &["--scan", "--pattern", "*cnt-e*"]).lines() {
                    crate::stores::cli(port, &["HINCRBY", key, "c", "1"]);
                }
            }
        }
        Plant::ForgetOwned => {
            for _ in 0..30 {
                crate::ops::delete_keys(&stores.view(), "own-");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Plant::DebtPlanted => {
            // A TAT 10^12 µs ahead: a debt no charge may leave. Written again every 50 ms for
            // 1.5 s: an overdraw caps a TAT it writes (the bound holding), so only an answer
            // that writes nothing (a peek) shows the planted debt, and one must meet it. One
            // script per master writes every budget key it holds, so a pass takes milliseconds.
            const PLANT: &str = "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
                 redis.call('SET', k, ARGV[2], 'PX', 60000) end";
            for _ in 0..30 {
                let tat = (now_us() + 1_000_000_000_000).to_string();
                for port in stores.masters() {
                    crate::stores::cli(port, &["EVAL", PLANT, "0", "*soak_budget_gcra*", &tat]);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Plant::PeekForgotten | Plant::ResetUnsent | Plant::OverrideReplayed => {}
        Plant::Leak => {
            let grpc = instances[0].grpc;
            let mut held = Vec::new();
            for _ in 0..400 {
                if let Ok(stream) = std::net::TcpStream::connect(grpc) {
                    held.push(stream);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            // Held to the end of the run: leaked.
            std::mem::forget(held);
        }
    }
}
