//! `make bench`: how fast an operator converges and what it costs, against floors of plain
//! clients doing the same writes, on the local control plane. Each operator runs as a user would
//! deploy it: its own process, under a ServiceAccount bound to our ClusterRole (not
//! `system:masters`, which API Priority and Fairness exempts), with its default settings. Besides
//! ours, any operator that serves controller-runtime's metric names can be run through the same
//! rounds (`--compare`).

mod appcluster;
mod at_rest;
pub mod cloudnativepg;
mod cluster;
mod copy;
mod cpu;
mod etcd;
mod myapp;
mod plane;
mod process;
mod report;
mod sampledb;
mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use self::appcluster::{AppClusterRound, appcluster_round};
use self::cluster::{Identity, install_crds};
use self::etcd::{etcd_pass, warm_up};
use self::myapp::{ChurnRound, MyAppRound, churn_round, myapp_round};
pub use self::plane::ControlPlane;
use self::plane::Plane;
pub use self::process::Launch;
use self::process::Operator;
pub use self::report::{chart, growth_chart, markdown, stateful_markdown};
use self::sampledb::sampledb_pass;

/// Our operator's own defaults, stated in the report.
const OPERATOR_CONCURRENCY: &str =
    "app-operator with 10 reconciles per controller (--max-concurrent-reconciles default)";

pub struct Options {
    pub sizes: Vec<usize>,
    pub concurrency: usize,
    /// Operator/floor passes per N.
    pub repeat: usize,
    pub appcluster_size: i32,
    pub steady: Duration,
    /// Create/delete cycles of the churn round (0 skips it), of `churn_size` MyApps each.
    pub churn_cycles: usize,
    pub churn_size: usize,
    pub output: PathBuf,
    pub control_plane: ControlPlane,
    /// Ours first, then the operators to compare with (MyApp rounds only).
    pub operators: Vec<Launch>,
    /// ClusterRoles (YAML files) the compared operators need besides ours.
    pub extra_roles: Vec<PathBuf>,
    /// The sizes the compared operators run (empty: all of `sizes`).
    pub compare_sizes: Vec<usize>,
}

impl Options {
    /// The MyApp sizes the operator at `index` runs (ours is 0): the restart is at the largest.
    fn sizes_for(&self, index: usize) -> Vec<usize> {
        if index == 0 || self.compare_sizes.is_empty() {
            return self.sizes.clone();
        }
        self.sizes
            .iter()
            .copied()
            .filter(|n| self.compare_sizes.contains(n))
            .collect()
    }
}

/// One operator's rounds.
#[derive(Serialize)]
pub struct OperatorRun {
    pub name: String,
    pub command: String,
    pub myapp: Vec<MyAppRound>,
    pub peak_rss_mib: f64,
    pub cpu_seconds: f64,
    pub requests_by_method: BTreeMap<String, u64>,
    /// Why a compared operator's run ended early (its finished rounds are kept).
    pub failure: Option<String>,
}

#[derive(Serialize)]
pub struct Report {
    pub machine: String,
    pub command: String,
    pub operator_settings: String,
    pub client_concurrency: usize,
    pub repeat: usize,
    pub operators: Vec<OperatorRun>,
    pub appcluster: Option<AppClusterRound>,
    pub churn: Option<ChurnRound>,
}

impl Report {
    /// Ours.
    pub fn ours(&self) -> Option<&OperatorRun> {
        self.operators.first()
    }
}

pub async fn run(options: &Options, tools: &local_cluster::Tools) -> Result<Report> {
    std::fs::create_dir_all(&options.output)?;
    let mut plane = Plane::open(
        options.control_plane.clone(),
        tools,
        &options.extra_roles,
        &options.output,
    )
    .await?;

    let mut operators = Vec::new();
    let (mut appcluster, mut churn) = (None, None);
    for (index, launch) in options.operators.iter().enumerate() {
        let mut myapp = Vec::new();
        let mut totals = None;
        let measured: Result<()> = async {
            let mut operator = Operator::start(launch, &plane.identity, &options.output).await?;
            let sizes = options.sizes_for(index);
            let largest = sizes.iter().copied().max().unwrap_or(0);
            for &n in &sizes {
                eprintln!("bench: {n} MyApps ({}), then the floors", launch.name());
                let round = myapp_round(&mut plane, &mut operator, n, n == largest, options);
                let round = round.await?;
                // The whole report is written at the end; a run stopped before (a series to
                // 10,000 takes hours) keeps each round it finished.
                std::fs::write(
                    options
                        .output
                        .join(format!("round-{}-{n}.json", launch.name())),
                    serde_json::to_vec_pretty(&round)?,
                )?;
                myapp.push(round);
            }
            if index == 0 {
                if options.appcluster_size > 0 {
                    eprintln!(
                        "bench: AppCluster 0 -> {} (operator), then {} Pods (floor)",
                        options.appcluster_size, options.appcluster_size
                    );
                    appcluster = Some(appcluster_round(&plane.admin, &plane.floor, options).await?);
                }
                if options.churn_cycles > 0 {
                    eprintln!(
                        "bench: churn, {} cycles of {} MyApps created and deleted",
                        options.churn_cycles, options.churn_size
                    );
                    churn = Some(churn_round(&plane.admin, &operator, options).await?);
                }
            }
            totals = Some((operator.totals(), operator.overall_peak()));
            Ok(())
        }
        .await;
        // Each operator leaves the plane empty: what it made (its AppCluster, an unfinished
        // round) would be in the next one's way, or stay on a cluster the harness was given.
        let cleared = plane.clear().await;
        // Ours is what is measured: without it there is nothing to compare with. A compared
        // operator that fails keeps the rounds it finished and says why beside them.
        let failure = match measured {
            Ok(()) => None,
            Err(error) if index > 0 => {
                eprintln!("bench: {} failed: {error:#}", launch.name());
                Some(format!("{error:#}"))
            }
            Err(error) => return Err(error),
        };
        cleared?;
        let ((cpu_seconds, requests_by_method), peak_rss_mib) = totals.unwrap_or_default();
        operators.push(OperatorRun {
            name: launch.name().to_owned(),
            command: launch.describe(),
            myapp,
            peak_rss_mib,
            cpu_seconds,
            requests_by_method,
            failure,
        });
    }
    Ok(Report {
        machine: machine(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        operator_settings: OPERATOR_CONCURRENCY.to_owned(),
        client_concurrency: options.concurrency,
        repeat: options.repeat,
        operators,
        appcluster,
        churn,
    })
}

/// One step of a stateful round: its seconds by the operator and by hand.
#[derive(Serialize)]
pub struct TimedStep {
    /// "0 → 3 members", "3.5.35 → 3.6.16" and so on.
    pub name: String,
    pub operator_seconds: f64,
    pub floor_seconds: f64,
}

/// `make bench-stateful`: the operator's stateful rounds on the real node, each beside its floor.
#[derive(Serialize)]
pub struct StatefulReport {
    pub machine: String,
    pub command: String,
    pub operator_command: String,
    /// A 1-member EtcdCluster's seconds to Ready, before the passes (the cluster's warm-up).
    pub warm_up_seconds: f64,
    /// Each pass's steps.
    pub etcd: Vec<Vec<TimedStep>>,
    pub sampledb: Vec<Vec<TimedStep>>,
    /// SampleDB's first steps beside CloudNativePG's, pass by pass (`--cloudnative-pg`).
    pub cloudnativepg: Vec<Vec<Beside>>,
    /// What each operator's process held when the passes ended, and CloudNativePG's peak and CPU.
    pub cloudnativepg_usage: Option<BesideUsage>,
    /// Both PostgreSQL operators with many databases Ready (`--at-rest`).
    pub at_rest: Option<at_rest::BothAtRest>,
    pub peak_rss_mib: f64,
    pub cpu_seconds: f64,
    pub requests_by_method: BTreeMap<String, u64>,
}

/// A step by app-operator (SampleDB) and by CloudNativePG.
#[derive(Serialize)]
pub struct Beside {
    pub name: String,
    pub app_operator_seconds: f64,
    pub cloudnativepg_seconds: f64,
}

#[derive(Serialize)]
pub struct BesideUsage {
    pub app_operator_rss_mib: f64,
    pub cloudnativepg: cloudnativepg::Usage,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatefulRound {
    Etcd,
    Sampledb,
}

pub struct StatefulOptions<'a> {
    /// Operator/by-hand passes of each round.
    pub repeat: usize,
    pub rounds: &'a [StatefulRound],
    pub output: &'a std::path::Path,
    /// CloudNativePG, built and on the node, for the SampleDB round to run beside it.
    pub cloudnative_pg: Option<&'a cloudnativepg::Built>,
    /// With CloudNativePG: how many databases each operator then holds at rest (0: none).
    pub at_rest: usize,
}

/// The stateful rounds by `launch` (ours), with the operator's identity, on the cluster of
/// `kubeconfig`.
pub async fn stateful(
    launch: &Launch,
    kubeconfig: &std::path::Path,
    options: &StatefulOptions<'_>,
    tools: &local_cluster::Tools,
) -> Result<StatefulReport> {
    let admin = local_cluster::admin_client(kubeconfig).await?;
    install_crds(&admin).await?;
    let identity = options.output.join("operator.kubeconfig");
    Identity {
        kubectl: tools.bin("kubectl"),
        admin_kubeconfig: kubeconfig,
        extra_roles: &[],
    }
    .create(&admin, &identity)
    .await?;
    let mut operator = Operator::start(launch, &identity, options.output).await?;
    eprintln!("bench: warm-up, a 1-member EtcdCluster");
    let warm_up_seconds = warm_up(&admin, &operator).await?;
    let cloudnative_pg = match options.cloudnative_pg {
        Some(built) => {
            eprintln!("bench: installing CloudNativePG");
            Some(cloudnativepg::install(&admin, kubeconfig, built).await?)
        }
        None => None,
    };
    let (mut etcd, mut sampledb, mut beside) = (Vec::new(), Vec::new(), Vec::new());
    for pass in 1..=options.repeat {
        if options.rounds.contains(&StatefulRound::Etcd) {
            eprintln!(
                "bench: EtcdCluster 0 -> 3 members, 3.5 -> 3.6, 3 -> 5 -> 3 members, backup, restore (operator, then by hand), pass {pass}"
            );
            etcd.push(etcd_pass(&admin, &operator).await?);
        }
        if options.rounds.contains(&StatefulRound::Sampledb) {
            eprintln!(
                "bench: SampleDB created, 1 GiB backed up and restored, upgraded 15 -> 17 (operator, then by hand), pass {pass}"
            );
            let steps = sampledb_pass(&admin, &operator).await?;
            if let Some(built) = options.cloudnative_pg {
                eprintln!(
                    "bench: CloudNativePG: a Cluster created, 1 GiB backed up and restored, pass {pass}"
                );
                let theirs = cloudnativepg::pass(&admin, built).await?;
                beside.push(
                    steps
                        .iter()
                        .zip(theirs)
                        .map(|(step, theirs)| Beside {
                            name: step.name.clone(),
                            app_operator_seconds: step.operator_seconds,
                            cloudnativepg_seconds: theirs.as_secs_f64(),
                        })
                        .collect(),
                );
            }
            sampledb.push(steps);
        }
    }
    let at_rest = match &cloudnative_pg {
        Some(installed) if options.at_rest > 0 => {
            Some(at_rest::both(&admin, &operator, installed, options.at_rest).await?)
        }
        _ => None,
    };
    let cloudnativepg_usage = match cloudnative_pg {
        Some(installed) => Some(BesideUsage {
            app_operator_rss_mib: operator.rss_mib(),
            cloudnativepg: installed.usage()?,
        }),
        None => None,
    };
    let (cpu_seconds, requests_by_method) = operator.totals();
    Ok(StatefulReport {
        machine: machine(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        operator_command: launch.describe(),
        warm_up_seconds,
        etcd,
        sampledb,
        cloudnativepg: beside,
        cloudnativepg_usage,
        at_rest,
        peak_rss_mib: operator.overall_peak(),
        cpu_seconds,
        requests_by_method,
    })
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
        })
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024 / 1024);
    format!("{cpus} cores, {memory} GiB RAM, Linux")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(sizes: &[usize], compare_sizes: &[usize]) -> Options {
        Options {
            sizes: sizes.to_vec(),
            concurrency: 10,
            repeat: 1,
            appcluster_size: 0,
            steady: Duration::ZERO,
            churn_cycles: 0,
            churn_size: 0,
            output: PathBuf::new(),
            control_plane: ControlPlane::Shared(PathBuf::new()),
            operators: Vec::new(),
            extra_roles: Vec::new(),
            compare_sizes: compare_sizes.to_vec(),
        }
    }

    #[test]
    fn compared_operators_run_only_their_sizes_in_the_order_of_ours() {
        let growth = options(&[100, 1000, 3000, 10000], &[3000, 1000]);
        assert_eq!(growth.sizes_for(0), [100, 1000, 3000, 10000]);
        assert_eq!(growth.sizes_for(1), [1000, 3000]);
        assert_eq!(
            options(&[100, 1000], &[]).sizes_for(2),
            [100, 1000],
            "without --compare-sizes every operator runs every size"
        );
    }
}
