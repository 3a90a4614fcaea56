//! `cargo xtask <task>`: what the Makefile targets run.

mod bench;
mod deliver;
mod deny;
mod image;
mod operator;
mod release;
mod sbom;
mod suites;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use local_cluster::install;
use local_cluster::{Cluster, ClusterOptions, Layout, Tools};

use crate::deliver::{
    acting_on_cluster, build_image, build_static_binary, install, load, manifests, overlay_dir,
    user_target,
};
use crate::operator::{http_get, run_operator};
use crate::suites::{RealNodeTests, chaos, test, test_oldest_kubernetes, test_real_node};

#[derive(Parser)]
#[command(about = "app-operator developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Build (or find in the cache) the pinned upstream binaries; prints their directory.
    Tools,
    /// Start the local control plane (etcd, kube-apiserver, controller-manager, scheduler) with
    /// a simulated (kwok) node or a real one (kubelet, containerd, kube-proxy, CoreDNS).
    ClusterUp {
        /// `kwok`: simulated nodes, Pods reported Running and nothing runs (cheap: the bench and
        /// scale tests); `real`: one kubelet node whose Pods run.
        #[arg(long, value_enum, default_value_t = NodeKind::Kwok)]
        node: NodeKind,
        /// How many kwok Nodes to register (`--node kwok`).
        #[arg(long, default_value_t = 1)]
        nodes: u32,
    },
    /// Stop every process of the local control plane and remove its state.
    ClusterDown,
    /// Run the whole test suite against a local control plane (started and stopped here if none runs).
    Test {
        /// Extra arguments for `cargo test`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        cargo_args: Vec<String>,
    },
    /// Run only the real-node suites (the node's lifecycle, then the samples with the operator
    /// deployed on a real node); `test` runs them after the rest.
    TestRealNode,
    /// Only the suites run against the oldest supported Kubernetes minor (the README's table).
    TestOldestKubernetes,
    /// Run the fault suite (crates/operator/tests/chaos.rs) serially, each row on a control plane
    /// of its own; then the fuzzer and the real node's long data scenarios (`real_node.rs`
    /// `long::`).
    Chaos {
        /// Extra arguments for the test binary (a row's name to run only it).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        test_args: Vec<String>,
    },
    /// Regenerate the CRD manifests under config/crd/bases from the Rust types.
    Manifests,
    /// `cargo deny check` (advisories from the committed snapshot, licences, bans, sources).
    Deny,
    /// Install the CRDs with $KUBECTL into the cluster of $KUBECONFIG (else ~/.kube/config, else
    /// the local control plane).
    Install,
    /// Remove the CRDs (and with them every custom resource) from that cluster.
    Uninstall,
    /// Deploy the operator (config/default, image $IMG) to that cluster.
    Deploy,
    /// Remove what `deploy` created (the CRDs and every custom resource too).
    Undeploy,
    /// Write dist/install.yaml: config/default with image $IMG, one file to `kubectl apply -f`.
    BuildInstaller,
    /// Local control plane up (if none), CRDs installed, the operator in the foreground, samples applied.
    Run,
    /// Build a static app-operator and write it as a one-layer OCI image archive (no Docker
    /// needed), named $IMG (default app-operator:latest).
    Image {
        /// Where to write the archive.
        #[arg(long, default_value = "target/app-operator-image.tar")]
        output: PathBuf,
    },
    /// Write a release of the workspace's version into dist/: the image archive (the repository
    /// of $IMG, tagged with the version), install.yaml with that image, the packaged chart and
    /// SHA256SUMS. Refused while the chart or CHANGELOG.md name another version.
    Release {
        #[arg(long, default_value = "dist")]
        output: PathBuf,
    },
    /// Push an image archive (`make image`'s) into the running local cluster's registry, where
    /// its real node pulls from, as `kind load image-archive` does for kind.
    Load {
        #[arg(long, default_value = "target/app-operator-image.tar")]
        archive: PathBuf,
    },
    /// Benchmark convergence and cost against the floor; writes target/bench/{results.json,results.md,chart.svg} (and growth.svg with two N or more).
    Bench {
        /// Numbers of MyApps, one round each.
        #[arg(long, value_delimiter = ',', default_values_t = [100, 300, 1000])]
        sizes: Vec<usize>,
        /// Client concurrency for creating objects (operator and floor alike).
        #[arg(long, default_value_t = 10)]
        concurrency: usize,
        /// Operator/floor pairs per N; the pair with the median ratio is reported.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// AppCluster size to scale to from 0 (0 skips the round).
        #[arg(long, default_value_t = 500)]
        appcluster_size: i32,
        /// How long to watch the converged operator for writes.
        #[arg(long, default_value_t = 60)]
        steady_seconds: u64,
        /// Create/delete cycles of the churn round (0 skips it): per-object state must not grow.
        #[arg(long, default_value_t = 20)]
        churn_cycles: usize,
        /// MyApps created and deleted in each churn cycle.
        #[arg(long, default_value_t = 500)]
        churn_size: usize,
        #[arg(long, default_value = "target/bench")]
        output: PathBuf,
        /// Another operator to run through the MyApp rounds after ours, as `NAME=COMMAND`: a
        /// command line (run as `sh -c 'exec env <line>'`, with `KUBECONFIG` set to the benchmark
        /// identity) that serves controller-runtime's metrics on `{metrics}` and `/readyz` on `{health}`, which
        /// are replaced by free local addresses. Repeatable.
        #[arg(long, value_parser = parse_compare)]
        compare: Vec<bench::Launch>,
        /// A YAML file of ClusterRoles the compared operators need besides ours (bound to the
        /// same ServiceAccount). Repeatable.
        #[arg(long)]
        compare_rbac: Vec<PathBuf>,
        /// The sizes the compared operators run (a subset of --sizes; default: all of them), so a
        /// growth series can go further with ours than with operators slower to run it.
        #[arg(long, value_delimiter = ',')]
        compare_sizes: Vec<usize>,
        /// Runs on the cluster of this kubeconfig (as its admin), with each pass's namespaces
        /// deleted after it, instead of on a control plane of the harness's own started anew
        /// after each pass.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// The stateful rounds on the local control plane with a real node (started if none runs,
    /// then stopped): an EtcdCluster created with 3 members, upgraded 3.5 -> 3.6, scaled
    /// 3 -> 5 -> 3, backed up and restored; a SampleDB created, 1 GiB backed up and restored,
    /// upgraded 15 -> 17; by the operator and by hand.
    BenchStateful {
        /// Operator/by-hand passes.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// The rounds to run.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "etcd,sampledb"
        )]
        rounds: Vec<bench::StatefulRound>,
        /// Runs CloudNativePG (built from hack/cloudnative-pg, installed from its release
        /// manifest) beside the SampleDB round: a Cluster created, 1 GiB backed up and restored.
        #[arg(long)]
        cloudnative_pg: bool,
        /// With --cloudnative-pg, after the passes: this many SampleDBs Ready, app-operator's
        /// memory and CPU over a quiet minute; then as many CloudNativePG Clusters (0: skipped).
        #[arg(long, default_value_t = 100)]
        at_rest: usize,
        #[arg(long, default_value = "target/bench-stateful")]
        output: PathBuf,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum NodeKind {
    Kwok,
    Real,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `NAME=COMMAND` of `--compare`.
fn parse_compare(value: &str) -> Result<bench::Launch, String> {
    match value.split_once('=') {
        Some((name, line)) if !name.is_empty() && !line.trim().is_empty() => {
            Ok(bench::Launch::Command {
                name: name.to_owned(),
                line: line.to_owned(),
            })
        }
        _ => Err(format!("expected NAME=COMMAND, got {value:?}")),
    }
}

fn tool_sources() -> PathBuf {
    local_cluster::repo_root().join("hack/k8s-tools")
}

fn run(cli: Cli) -> Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    match cli.task {
        Task::Tools => {
            let tools = Tools::ensure(&tool_sources())?;
            println!("{}", tools.dir.join("bin").display());
        }
        Task::ClusterUp { node, nodes } => {
            let tools = Tools::ensure(&tool_sources())?;
            let layout = Layout::default();
            let options = match node {
                NodeKind::Kwok => ClusterOptions {
                    nodes,
                    ..ClusterOptions::default()
                },
                NodeKind::Real => ClusterOptions::real_node(),
            };
            let cluster = runtime.block_on(Cluster::up(&layout, &tools, &options))?;
            println!(
                "local control plane is up (logs: {})",
                layout.logs().display()
            );
            println!("export KUBECONFIG={}", cluster.kubeconfig.display());
            println!("export PATH={}:$PATH", tools.dir.join("bin").display());
            if matches!(node, NodeKind::Real) {
                let node = local_cluster::node::NodeLayout::of(&layout);
                let store = node.object_store()?;
                println!(
                    "object store (S3) at {}, bucket {}; keys in {}",
                    store.endpoint,
                    store.bucket,
                    node.object_store_file().display()
                );
            }
        }
        Task::ClusterDown => {
            let layout = Layout::default();
            let stopped = Cluster::down(&layout)?;
            if stopped.is_empty() {
                println!("no local control plane was running");
            } else {
                println!("stopped {}", stopped.join(", "));
            }
        }
        Task::Manifests => manifests()?,
        Task::Deny => deny::deny(&repo())?,
        Task::Install => install(&acting_on_cluster(user_target()?)?)?,
        Task::Uninstall => {
            let target = acting_on_cluster(user_target()?)?;
            let crds = repo().join("config/crd");
            print!(
                "{}",
                target.run(&["delete", "--ignore-not-found", "-k", path(&crds)?])?
            );
        }
        Task::Deploy => {
            let target = acting_on_cluster(user_target()?)?;
            println!("deploying image {}", target.img);
            print!("{}", install::deploy(&target, &repo(), &overlay_dir())?);
        }
        Task::Undeploy => {
            let target = acting_on_cluster(user_target()?)?;
            print!("{}", install::undeploy(&target, &repo(), &overlay_dir())?);
        }
        Task::BuildInstaller => {
            let target = user_target()?;
            let rendered = install::installer(&target, &repo(), &overlay_dir())?;
            let out = repo().join("dist/install.yaml");
            std::fs::create_dir_all(repo().join("dist"))?;
            std::fs::write(&out, rendered)?;
            println!("wrote {} (image {})", out.display(), target.img);
        }
        Task::Run => return runtime.block_on(run_operator()),
        Task::Image { output } => {
            let img = local_cluster::install::UserEnv::from_process().img;
            build_image(
                &output,
                img.as_deref()
                    .unwrap_or(local_cluster::install::DEFAULT_IMG),
            )?;
        }
        Task::Load { archive } => load(&archive)?,
        Task::Release { output } => release::release(&repo().join(output))?,
        Task::Bench {
            sizes,
            concurrency,
            repeat,
            appcluster_size,
            steady_seconds,
            churn_cycles,
            churn_size,
            output,
            compare,
            compare_rbac,
            compare_sizes,
            kubeconfig,
        } => {
            let output = if output.is_relative() {
                repo().join(output)
            } else {
                output
            };
            let control_plane = match kubeconfig {
                Some(kubeconfig) => bench::ControlPlane::Shared(kubeconfig),
                None => bench::ControlPlane::Own(Layout {
                    state_dir: repo().join(".local/bench-cluster"),
                }),
            };
            runtime.block_on(bench_myapp(bench::Options {
                sizes,
                concurrency,
                repeat,
                appcluster_size,
                steady: std::time::Duration::from_secs(steady_seconds),
                churn_cycles,
                churn_size,
                output,
                control_plane,
                operators: compare,
                extra_roles: compare_rbac,
                compare_sizes,
            }))?;
        }
        Task::BenchStateful {
            repeat,
            rounds,
            cloudnative_pg,
            at_rest,
            output,
        } => {
            if cloudnative_pg && !rounds.contains(&bench::StatefulRound::Sampledb) {
                bail!("--cloudnative-pg runs beside the SampleDB round: add it to --rounds");
            }
            runtime.block_on(bench_stateful(
                repeat,
                &rounds,
                cloudnative_pg.then_some(at_rest),
                repo().join(output),
            ))?;
        }
        Task::Test { cargo_args } => return runtime.block_on(test(&cargo_args)),
        Task::TestOldestKubernetes => {
            let tools = Tools::ensure(&tool_sources())?;
            runtime.block_on(test_oldest_kubernetes(&tools))?;
        }
        Task::TestRealNode => {
            let tools = Tools::ensure(&tool_sources())?;
            runtime.block_on(test_real_node(&tools, RealNodeTests::Quick))?;
        }
        Task::Chaos { test_args } => return runtime.block_on(chaos(&test_args)),
    }
    Ok(ExitCode::SUCCESS)
}

pub fn repo() -> PathBuf {
    local_cluster::repo_root()
}

fn path(path: &Path) -> Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

/// `make bench`: the operator as the image ships it (the static release binary), on a control
/// plane of the harness's own (stopped here) or on the one given.
async fn bench_myapp(mut options: bench::Options) -> Result<()> {
    let tools = Tools::ensure(&tool_sources())?;
    options.operators.insert(
        0,
        bench::Launch::Ours {
            binary: build_static_binary()?,
            args: Vec::new(),
        },
    );
    let result = run_bench(&options, &tools).await;
    if let bench::ControlPlane::Own(layout) = &options.control_plane {
        Cluster::down(layout)?;
    }
    let report = result?;
    print!("{}", bench::markdown(&report));
    Ok(())
}

/// `make bench-stateful`: the static release operator on the local control plane with a real node
/// (started here and stopped after, unless one runs), with etcd members' names resolved as
/// `make run` does.
async fn bench_stateful(
    repeat: usize,
    rounds: &[bench::StatefulRound],
    // CloudNativePG beside SampleDB, and how many databases each then holds at rest.
    cloudnative_pg_at_rest: Option<usize>,
    output: PathBuf,
) -> Result<()> {
    let tools = Tools::ensure(&tool_sources())?;
    if rounds.contains(&bench::StatefulRound::Sampledb) {
        // The SampleDB round asks PostgreSQL with `psql`.
        suites::ensure_postgres()?;
    }
    let launch = bench::Launch::Ours {
        binary: build_static_binary()?,
        args: vec![
            "--etcd-dns-server".to_owned(),
            local_cluster::node::CLUSTER_DNS.to_owned(),
        ],
    };
    let layout = Layout::default();
    let started = operator::real_node_cluster(&layout, &tools).await?;
    std::fs::create_dir_all(&output)?;
    let result = async {
        pull_node_images(&layout, &tools)?;
        let built = cloudnative_pg_at_rest
            .map(|_| {
                let node = local_cluster::node::NodeLayout::of(&layout);
                bench::cloudnativepg::build(&tools, &node, &output)
            })
            .transpose()?;
        bench::stateful(
            &launch,
            &layout.kubeconfig(),
            &bench::StatefulOptions {
                repeat,
                rounds,
                output: &output,
                cloudnative_pg: built.as_ref(),
                at_rest: cloudnative_pg_at_rest.unwrap_or(0),
            },
            &tools,
        )
        .await
    }
    .await;
    if started {
        Cluster::down(&layout)?;
    }
    let report = result?;
    std::fs::write(
        output.join("results.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    let markdown = bench::stateful_markdown(&report);
    std::fs::write(output.join("results.md"), &markdown)?;
    print!("{markdown}");
    Ok(())
}

/// Every image of the real node's set pulled onto it: a first pull (5 s for PostgreSQL's, as
/// long again for the toolbox the storage provisioner's helper Pods run) is the node's cost, and
/// it fell on the operator's first step, since the step by hand runs second.
fn pull_node_images(layout: &Layout, tools: &Tools) -> Result<()> {
    let images = local_cluster::images::Images::ensure(tools, &tools.sources)?;
    let names: Vec<String> = images
        .images
        .iter()
        .filter_map(|image| image.names.first().cloned())
        .collect();
    eprintln!("bench: pulling {} images onto the node", names.len());
    local_cluster::node::pull(layout, &names)?;
    Ok(())
}

/// Runs the benchmark and writes its results (JSON, markdown, SVG chart) into `options.output`.
async fn run_bench(options: &bench::Options, tools: &Tools) -> Result<bench::Report> {
    let report = bench::run(options, tools).await?;
    std::fs::write(
        options.output.join("results.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    std::fs::write(options.output.join("results.md"), bench::markdown(&report))?;
    bench::chart(&report, &options.output.join("chart.svg"))?;
    bench::growth_chart(&report, &options.output.join("growth.svg"))?;
    Ok(report)
}
