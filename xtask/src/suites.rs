//! `make test` and `make chaos`: the suites, the clusters they run on, the bench smoke.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};

use anyhow::{Context, Result, bail};
use local_cluster::install::{self, Target};
use local_cluster::{Cluster, ClusterOptions, Kubernetes, Layout, Tools};

use crate::deliver::{StaticBinaryBuild, build_image, overlay_dir};
use crate::{bench, path, repo, run_bench, tool_sources};

/// The benchmark at N = 20 on the test control plane, so it cannot rot; fails on a result no
/// build should produce (not converged, writes at rest, overshoot).
pub(crate) async fn bench_smoke(kubeconfig: &Path, tools: &Tools) -> Result<()> {
    let options = bench::Options {
        sizes: vec![20],
        concurrency: 10,
        repeat: 1,
        appcluster_size: 20,
        steady: std::time::Duration::from_secs(5),
        churn_cycles: 2,
        churn_size: 10,
        output: repo().join("target/bench-smoke"),
        control_plane: bench::ControlPlane::Shared(kubeconfig.to_owned()),
        // Ours, then as `--compare` runs another operator: ours again, behind an environment
        // prefix, and one that exits at once (its failure is reported beside the others' rows).
        operators: vec![
            bench::Launch::Ours {
                binary: repo().join("target/debug/app-operator"),
                args: Vec::new(),
            },
            bench::Launch::Command {
                name: "env-prefixed".to_owned(),
                line: format!(
                    "APP_OPERATOR_LOG_LEVEL=warn {} run --metrics-bind-address={{metrics}} --health-probe-bind-address={{health}}",
                    repo().join("target/debug/app-operator").display()
                ),
            },
            bench::Launch::Command {
                name: "exits-at-once".to_owned(),
                line: "false".to_owned(),
            },
        ],
        extra_roles: Vec::new(),
        compare_sizes: Vec::new(),
    };
    let report = run_bench(&options, tools).await?;
    let round = report
        .ours()
        .and_then(|run| run.myapp.first())
        .context("no MyApp round")?;
    let cluster = report.appcluster.as_ref().context("no AppCluster round")?;
    let checks = [
        ("all 20 MyApps Ready", round.all_ready()),
        ("no operator writes at rest", round.at_rest.writes == 0),
        ("both floors converged", round.floors_converged()),
        (
            "restarted without writes",
            round.restart.as_ref().is_some_and(|r| r.writes() == 0),
        ),
        (
            "AppCluster reached 20 Ready Pods",
            cluster.operator_seconds.is_some(),
        ),
        ("never more than 20 Pods", cluster.most_pods_at_once <= 20),
        (
            "churn: 2 create/delete cycles measured",
            report.churn.as_ref().is_some_and(|c| c.rss_mib.len() == 2),
        ),
        ("chart written", options.output.join("chart.svg").exists()),
        (
            "an operator behind an environment prefix measured",
            report.operators.get(1).is_some_and(|run| {
                run.failure.is_none() && run.myapp.first().is_some_and(|r| r.all_ready())
            }),
        ),
        (
            "an operator that exits at once reported as failed, the others' rows kept",
            report
                .operators
                .get(2)
                .is_some_and(|run| run.failure.is_some())
                && std::fs::read_to_string(options.output.join("results.md")).is_ok_and(|md| {
                    md.contains("### exits-at-once\n\n`false`\n\n**Failed:**")
                        && md.contains("### env-prefixed")
                }),
        ),
    ];
    let failed: Vec<&str> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(name, _)| *name)
        .collect();
    println!(
        "bench smoke: {} passed, {} failed",
        checks.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        bail!("bench smoke failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Debian's PostgreSQL server, which the SampleDB script tests run (`testkit::postgres`):
/// installed with apt-get unless some `/usr/lib/postgresql/<major>/bin/initdb` is there already.
pub(crate) fn ensure_postgres() -> Result<()> {
    if testkit::postgres::Binaries::find().is_some() {
        return Ok(());
    }
    eprintln!(
        "installing Debian's PostgreSQL server (no {}/<major>/bin/initdb) for the SampleDB script tests",
        testkit::postgres::ROOT
    );
    for args in [
        &["update"][..],
        &["install", "-y", "--no-install-recommends", "postgresql"],
    ] {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .context("running apt-get (the SampleDB script tests need Debian's `postgresql`)")?;
        if !status.success() {
            bail!(
                "apt-get {} failed ({status}): install Debian's `postgresql` package by hand \
                 (apt-get install --no-install-recommends postgresql), the SampleDB script tests need it",
                args.join(" ")
            );
        }
    }
    testkit::postgres::Binaries::get().context("after installing `postgresql`")?;
    Ok(())
}

/// `PATH` with the pinned tools first (the tests run kubectl and etcd).
pub(crate) fn path_with(tools: &Tools) -> Result<std::ffi::OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![tools.dir.join("bin")];
    paths.extend(std::env::split_paths(&path));
    std::env::join_paths(paths).context("PATH")
}

/// The control plane tests share: an explicit one (`APP_OPERATOR_TEST_KUBECONFIG`), the running
/// local one, or one started for this run and stopped by [`TestCluster::release`].
pub(crate) struct TestCluster {
    kubeconfig: PathBuf,
    started_here: Option<Layout>,
}

impl TestCluster {
    async fn acquire(tools: &Tools) -> Result<TestCluster> {
        let layout = Layout::default();
        Ok(match std::env::var_os("APP_OPERATOR_TEST_KUBECONFIG") {
            Some(path) => TestCluster {
                kubeconfig: PathBuf::from(path),
                started_here: None,
            },
            None if !layout.running().is_empty() => TestCluster {
                kubeconfig: layout.kubeconfig(),
                started_here: None,
            },
            None => {
                eprintln!("starting a local control plane for the test run");
                let cluster = Cluster::up(&layout, tools, &ClusterOptions::default()).await?;
                TestCluster {
                    kubeconfig: cluster.kubeconfig,
                    started_here: Some(layout),
                }
            }
        })
    }

    fn release(self) -> Result<()> {
        if let Some(layout) = self.started_here {
            let stopped = Cluster::down(&layout)?;
            eprintln!("stopped the test control plane ({})", stopped.join(", "));
        }
        Ok(())
    }
}

/// `cargo test` with `args`, the pinned tools on `PATH` and `env` set.
pub(crate) fn cargo_test(
    tools: &Tools,
    args: &[&str],
    extra: &[String],
    env: &[(&str, &OsStr)],
) -> Result<ExitStatus> {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.arg("test").args(args).args(extra);
    run_with_tools(&mut cargo, tools, env).context("running cargo test")
}

/// Runs a suite's `command` with `env` and the tools first on its PATH.
fn run_with_tools(
    command: &mut Command,
    tools: &Tools,
    env: &[(&str, &OsStr)],
) -> Result<ExitStatus> {
    Ok(command
        .envs(env.iter().copied())
        .env("PATH", path_with(tools)?)
        .status()?)
}

/// The fault suite, one row at a time (two would share two cores and miss their deadlines; each
/// row starts and stops a control plane of its own; its harness overlaps only a row's idle
/// quiet check with the next row), then, unless `test_args` picked rows, the
/// spec fuzzer with more cases than `make test` runs (`FUZZ_CASES`, 2000 unless set).
///
/// With `APP_OPERATOR_CHAOS_MUTATE` set (the mutation check) the operator is built with its
/// `mutations` feature, the deliberate defects each row must catch.
pub(crate) async fn chaos(test_args: &[String]) -> Result<ExitCode> {
    let tools = Tools::ensure(&tool_sources())?;
    let mutated = std::env::var_os("APP_OPERATOR_CHAOS_MUTATE").is_some();
    let features: &[&str] = if mutated {
        &["--features", "mutations"]
    } else {
        &[]
    };
    let rows = cargo_test(
        &tools,
        &[
            &["--locked", "-p", "app-operator", "--test", "chaos"],
            features,
            &["--"],
        ]
        .concat(),
        test_args,
        &[],
    )?;
    let fuzz = if test_args.is_empty() {
        let cases = std::env::var_os("FUZZ_CASES").unwrap_or_else(|| "2000".into());
        let cluster = TestCluster::acquire(&tools).await?;
        let status = cargo_test(
            &tools,
            &["--locked", "-p", "app-operator", "--test", "fuzz", "--"],
            &["--nocapture".to_owned()],
            &[
                ("FUZZ_CASES", &cases),
                (
                    "APP_OPERATOR_TEST_KUBECONFIG",
                    cluster.kubeconfig.as_os_str(),
                ),
            ],
        );
        cluster.release()?;
        Some(status?)
    } else {
        None
    };
    if !rows.success() {
        bail!("the fault suite failed ({rows})");
    }
    if let Some(fuzz) = fuzz.filter(|status| !status.success()) {
        bail!("the fuzzer failed ({fuzz})");
    }
    if test_args.is_empty() {
        test_real_node(&tools, RealNodeTests::Long).await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The whole suite on the shared control plane (kwok), then the bench smoke on it; then the real
/// node: its own life on this machine, and the samples with the operator deployed on it.
pub(crate) async fn test(cargo_args: &[String]) -> Result<ExitCode> {
    ensure_postgres()?;
    let tools = Tools::ensure(&tool_sources())?;
    // The image's release binary is one rustc on one core for most of its build (fat LTO in one
    // codegen unit); built beside the test build and the kwok suites, which leave a core idle,
    // instead of after them. `make image` in the suites and the real-node suite find it built.
    let static_binary = StaticBinaryBuild::start()?;
    let cluster = TestCluster::acquire(&tools).await?;
    let status = cargo_test(
        &tools,
        &["--workspace", "--locked"],
        cargo_args,
        &[(
            "APP_OPERATOR_TEST_KUBECONFIG",
            cluster.kubeconfig.as_os_str(),
        )],
    );
    let smoke = match &status {
        Ok(status) if status.success() => bench_smoke(&cluster.kubeconfig, &tools).await,
        _ => Ok(()),
    };
    cluster.release()?;
    let status = status?;
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    smoke?;
    static_binary.finish()?;
    chaos_smoke(&tools)?;
    test_oldest_kubernetes(&tools).await?;
    test_real_node(&tools, RealNodeTests::Quick).await?;
    Ok(ExitCode::SUCCESS)
}

/// The rows of the fault suite `make test` runs (each on a control plane of its own, a minute or
/// so), with a short quiet check: the zombie-write row, which also proves the shipped RBAC and
/// admission policies let a leader work.
const CHAOS_SMOKE: &[&str] = &["a_deposed_leaders_held_writes_are_refused"];

fn chaos_smoke(tools: &Tools) -> Result<()> {
    let rows: Vec<String> = CHAOS_SMOKE.iter().map(|row| (*row).to_owned()).collect();
    let status = cargo_test(
        tools,
        &["--locked", "-p", "app-operator", "--test", "chaos", "--"],
        &rows,
        &[("APP_OPERATOR_CHAOS_QUIET_SECS", OsStr::new("10"))],
    )?;
    if !status.success() {
        bail!("the fault suite's smoke rows failed ({status})");
    }
    Ok(())
}

/// The suites that say the CRDs install (their CEL rules compile), the operator's RBAC is enough
/// and it reconciles, on a control plane of the oldest Kubernetes minor the README and the chart's
/// `kubeVersion` claim: the schema, deployment, process (RBAC, leader election) and MyApp suites.
pub(crate) async fn test_oldest_kubernetes(tools: &Tools) -> Result<()> {
    let layout = Layout {
        state_dir: repo().join("target/test-oldest-kubernetes"),
    };
    eprintln!(
        "starting a Kubernetes {} control plane for the oldest supported version",
        Kubernetes::OLDEST_MINOR
    );
    let options = ClusterOptions {
        kubernetes: Kubernetes::Oldest,
        ..ClusterOptions::default()
    };
    let cluster = Cluster::up(&layout, tools, &options).await?;
    let suites = async {
        let version = local_cluster::admin_client(&cluster.kubeconfig)
            .await?
            .apiserver_version()
            .await?;
        let serving = format!("{}.{}", version.major, version.minor);
        if serving != Kubernetes::OLDEST_MINOR {
            bail!(
                "the oldest control plane serves {}, not {}",
                version.git_version,
                Kubernetes::OLDEST_MINOR
            );
        }
        eprintln!(
            "running the suites against kube-apiserver {}",
            version.git_version
        );
        let mut args = vec!["--locked", "-p", "app-operator"];
        for suite in [
            "etcdcluster_schema",
            "invalid_objects",
            "deploy",
            "process",
            "myapp",
        ] {
            args.extend(["--test", suite]);
        }
        let status = cargo_test(
            tools,
            &args,
            &[],
            &[(
                "APP_OPERATOR_TEST_KUBECONFIG",
                cluster.kubeconfig.as_os_str(),
            )],
        )?;
        if !status.success() {
            bail!(
                "the suites failed on Kubernetes {} ({status})",
                Kubernetes::OLDEST_MINOR
            );
        }
        Ok(())
    }
    .await;
    Cluster::down(&layout)?;
    suites
}

/// Which of the operator's `real_node` tests run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RealNodeTests {
    /// `make test`: the node's own life, every test but the long data scenarios (`long::`),
    /// then the chart.
    Quick,
    /// `make chaos`: the long data scenarios only.
    Long,
}

/// The real-node suites, one real node at a time: the node's own life (`local-cluster`'s
/// `real_node`: up, Pods run, down leaves nothing, up again), then a cluster with a real node on
/// which the operator is deployed as users deploy it (`make image`, `make load`, `make deploy`)
/// and the operator's `real_node` tests run.
pub(crate) async fn test_real_node(tools: &Tools, which: RealNodeTests) -> Result<()> {
    let started = std::time::Instant::now();
    let built = RealNodeBuild::new()?;
    if which == RealNodeTests::Quick {
        let lifecycle = built.lifecycle.run(tools, &[], &[])?;
        if !lifecycle.success() {
            bail!("the real node's lifecycle test failed ({lifecycle})");
        }
    }
    let archive = repo().join("target/app-operator-image.tar");
    build_image(&archive, install::DEFAULT_IMG)?;
    let layout = Layout {
        state_dir: repo().join("target/test-real-node"),
    };
    eprintln!("starting a local control plane with a real node for the real-node suite");
    let cluster = Cluster::up(&layout, tools, &ClusterOptions::real_node()).await?;
    let suite = async {
        let registry = local_cluster::node::NodeLayout::of(&layout).registry_address()?;
        local_cluster::registry::push_archive(&archive, &registry)?;
        let target = Target {
            kubectl: tools.bin("kubectl"),
            kubeconfig: Some(cluster.kubeconfig.clone().into_os_string()),
            img: install::DEFAULT_IMG.to_owned(),
        };
        print!("{}", install::deploy(&target, &repo(), &overlay_dir())?);
        // A node restart stops every Pod of every test: its scenarios run alone, last.
        let selections: &[&[&str]] = match which {
            RealNodeTests::Quick => &[&["--skip", "long::", "--skip", "node_restart::"]],
            RealNodeTests::Long => &[&["long::"], &["node_restart::"]],
        };
        for selection in selections {
            // What the tests measure (the leader handover, the data checks) is printed.
            let mut test_args = vec!["--nocapture".to_owned()];
            test_args.extend(selection.iter().map(|arg| (*arg).to_owned()));
            let status = built.operator.run(
                tools,
                &test_args,
                &[
                    (
                        "APP_OPERATOR_TEST_KUBECONFIG",
                        cluster.kubeconfig.as_os_str(),
                    ),
                    // The tests run `kubectl app-operator` as users do: its binary.
                    ("KUBECTL_APP_OPERATOR", built.plugin.as_os_str()),
                ],
            )?;
            if !status.success() {
                bail!("the real-node suite failed ({status})");
            }
        }
        if which == RealNodeTests::Long {
            return Ok(());
        }
        // The chart, as Helm users install it, in place of `make deploy`'s operator.
        test_namespaces_gone(&target)?;
        print!("{}", install::undeploy(&target, &repo(), &overlay_dir())?);
        helm_release(tools, &cluster.kubeconfig, &registry)?;
        Ok(())
    }
    .await;
    Cluster::down(&layout)?;
    eprintln!(
        "real-node suites done in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    suite
}

/// The real-node suites (`test = false`) and the kubectl plugin, built as `cargo test
/// --workspace` builds: with features unified over the whole workspace, so nothing the kwok run
/// compiled is compiled again. Asked for by package (`-p local-cluster`, `cargo build -p
/// kubectl-app-operator`), cargo unifies fewer features and rebuilt about ninety crates twice:
/// 3.5 minutes of a cold `make test`.
struct RealNodeBuild {
    /// `local-cluster`'s: the node's own life.
    lifecycle: TestExecutable,
    /// The operator's samples on the node.
    operator: TestExecutable,
    plugin: PathBuf,
}

/// A test binary, run as `cargo test` runs it: in its package's directory.
struct TestExecutable {
    path: PathBuf,
    package_dir: PathBuf,
}

impl RealNodeBuild {
    fn new() -> Result<RealNodeBuild> {
        let output = Command::new(env!("CARGO"))
            .args([
                "test",
                "--workspace",
                "--locked",
                "--no-run",
                "--test",
                "real_node",
                "--test",
                "plugin",
                "--message-format",
                "json-render-diagnostics",
            ])
            .stderr(std::process::Stdio::inherit())
            .output()
            .context("running cargo test --no-run")?;
        if !output.status.success() {
            bail!("building the real-node suites failed ({})", output.status);
        }
        Self::from_messages(&String::from_utf8_lossy(&output.stdout))
    }

    /// From cargo's JSON messages: the executables it built.
    fn from_messages(messages: &str) -> Result<RealNodeBuild> {
        let (mut lifecycle, mut operator, mut plugin) = (None, None, None);
        for line in messages.lines() {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let (Some(path), Some(manifest)) = (
                message["executable"].as_str(),
                message["manifest_path"].as_str(),
            ) else {
                continue;
            };
            let package_dir = Path::new(manifest).parent().unwrap_or(Path::new("/"));
            let executable = TestExecutable {
                path: PathBuf::from(path),
                package_dir: package_dir.to_owned(),
            };
            match message["target"]["name"].as_str() {
                Some("real_node") if package_dir.ends_with("crates/local-cluster") => {
                    lifecycle = Some(executable);
                }
                Some("real_node") => operator = Some(executable),
                Some("kubectl-app_operator") => plugin = Some(executable.path),
                _ => {}
            }
        }
        Ok(RealNodeBuild {
            lifecycle: lifecycle.context("cargo built no local-cluster real_node test")?,
            operator: operator.context("cargo built no app-operator real_node test")?,
            plugin: plugin.context("cargo built no kubectl-app_operator")?,
        })
    }
}

impl TestExecutable {
    fn run(&self, tools: &Tools, args: &[String], env: &[(&str, &OsStr)]) -> Result<ExitStatus> {
        let mut test = Command::new(&self.path);
        test.current_dir(&self.package_dir).args(args);
        run_with_tools(&mut test, tools, env)
            .with_context(|| format!("running {}", self.path.display()))
    }
}

/// Waits (at most [`NAMESPACES_GONE`]) until the namespaces the real-node tests made
/// (`real-…`) are gone. A test's namespace is still being deleted when it ends, and the
/// SampleDBs in it wait on the operator for their final snapshots: removed first, the operator
/// would leave them, their namespace and the undeploy's CRD deletion waiting forever.
fn test_namespaces_gone(target: &Target) -> Result<()> {
    let started = std::time::Instant::now();
    loop {
        let listed = target.run(&["get", "namespaces", "-o", "name"])?;
        let left: Vec<&str> = listed
            .lines()
            .filter(|name| name.starts_with("namespace/real-"))
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        if started.elapsed() > NAMESPACES_GONE {
            bail!("the test namespaces {left:?} are still there after {NAMESPACES_GONE:?}");
        }
        // Between polls, under the bound above.
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
}

/// How long the real-node tests' namespaces may take to go (a SampleDB's final snapshot is a
/// `pg_dump` Job).
const NAMESPACES_GONE: std::time::Duration = std::time::Duration::from_secs(300);

/// The chart on the real node as a user installs a release of it: `make image IMG=app-operator:v1`,
/// `make load`, `helm install --set image.tag=v1` (Ready, `helm test` passes); `helm upgrade` to a
/// chart whose MyApp CRD changed changes the CRD in the cluster; `helm uninstall` keeps the CRDs.
fn helm_release(tools: &Tools, kubeconfig: &Path, registry: &str) -> Result<()> {
    let archive = repo().join("target/app-operator-image-v1.tar");
    build_image(&archive, "app-operator:v1")?;
    local_cluster::registry::push_archive(&archive, registry)?;
    let run = |tool: &str, args: &[&str]| -> Result<String> {
        let output = Command::new(tools.bin(tool))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .output()?;
        if !output.status.success() {
            bail!(
                "{tool} {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let chart = repo().join("charts/app-operator");
    let release = ["app-operator", "-n", "app-operator-helm"];
    run(
        "helm",
        &[
            &["install", release[0], path(&chart)?],
            &release[1..],
            &[
                "--create-namespace",
                "--set=image.tag=v1",
                // The chart's default busybox:1.37 is not built here; the toolbox has GNU wget,
                // which takes the same arguments.
                "--set=test.image=docker.io/app-operator/toolbox:1",
                "--wait",
                "--timeout=180s",
            ],
        ]
        .concat(),
    )?;
    run(
        "helm",
        &[&["test"][..], &release, &["--timeout=120s"]].concat(),
    )?;
    let image = run(
        "kubectl",
        &[
            "get",
            "deployment",
            "-n",
            release[2],
            "-o",
            "jsonpath={.items[*].spec.template.spec.containers[*].image}",
        ],
    )?;
    if image.trim() != "app-operator:v1" {
        bail!("the release runs {image}, not app-operator:v1");
    }
    println!("helm install --set image.tag=v1: Ready, helm test passed");

    let next = repo().join("target/chart-next");
    add_printer_column(&next, "example.com_myapps.yaml", "Upgraded")?;
    run(
        "helm",
        &[
            &["upgrade", release[0], path(&next)?],
            &release[1..],
            &["--reuse-values", "--wait", "--timeout=180s"],
        ]
        .concat(),
    )?;
    let columns = run(
        "kubectl",
        &[
            "get",
            "crd",
            "myapps.example.com",
            "-o",
            "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}",
        ],
    )?;
    if !columns
        .split_whitespace()
        .any(|column| column == "Upgraded")
    {
        bail!("helm upgrade left the MyApp CRD as it was (columns: {columns})");
    }
    println!("helm upgrade: the MyApp CRD gained the chart's new column");
    run(
        "helm",
        &[&["uninstall"][..], &release, &["--wait"]].concat(),
    )?;
    run("kubectl", &["get", "crd", "myapps.example.com"])
        .context("helm uninstall removed the CRDs (crds.keep)")?;
    println!("helm uninstall: the CRDs are kept");
    Ok(())
}

/// A copy of the chart at `next` whose CRD `file` has one more printer column: the next release
/// of the chart, as far as its CRDs go.
fn add_printer_column(next: &Path, file: &str, column: &str) -> Result<()> {
    crate::release::copy_chart(next)?;
    let crd_path = next.join("files/crds").join(file);
    let mut crd: serde_json::Value = serde_norway::from_str(&std::fs::read_to_string(&crd_path)?)?;
    let columns = crd
        .pointer_mut("/spec/versions/0/additionalPrinterColumns")
        .and_then(serde_json::Value::as_array_mut)
        .with_context(|| format!("{file} has no printer columns"))?;
    columns.push(serde_json::json!({
        "name": column, "type": "string", "jsonPath": ".metadata.name"
    }));
    std::fs::write(&crd_path, serde_norway::to_string(&crd)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(package: &str, target: &str, executable: Option<&str>) -> String {
        serde_json::json!({
            "reason": "compiler-artifact",
            "manifest_path": format!("/r/crates/{package}/Cargo.toml"),
            "target": { "name": target },
            "executable": executable,
        })
        .to_string()
    }

    #[test]
    fn finds_the_real_node_suites_and_the_plugin_among_cargos_messages() {
        let messages = [
            artifact("operator", "app_operator", None),
            artifact(
                "local-cluster",
                "real_node",
                Some("/r/target/debug/deps/real_node-1"),
            ),
            artifact(
                "operator",
                "real_node",
                Some("/r/target/debug/deps/real_node-2"),
            ),
            artifact(
                "kubectl-plugin",
                "kubectl-app_operator",
                Some("/r/target/debug/kubectl-app_operator"),
            ),
            r#"{"reason":"build-finished","success":true}"#.to_owned(),
        ];
        let built = RealNodeBuild::from_messages(&messages.join("\n")).unwrap();
        assert_eq!(
            built.lifecycle.path,
            Path::new("/r/target/debug/deps/real_node-1")
        );
        assert_eq!(
            built.lifecycle.package_dir,
            Path::new("/r/crates/local-cluster")
        );
        assert_eq!(
            built.operator.path,
            Path::new("/r/target/debug/deps/real_node-2")
        );
        assert_eq!(built.operator.package_dir, Path::new("/r/crates/operator"));
        assert_eq!(
            built.plugin,
            Path::new("/r/target/debug/kubectl-app_operator")
        );

        let without_plugin = RealNodeBuild::from_messages(&messages[..3].join("\n"));
        assert_eq!(
            without_plugin.err().map(|e| e.to_string()).as_deref(),
            Some("cargo built no kubectl-app_operator")
        );
    }
}
