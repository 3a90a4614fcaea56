//! The report: a markdown table per operator, and the SVG chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::myapp::{OPERATOR_CPU, Pass};
use super::{Beside, OperatorRun, Report, StatefulReport, TimedStep};

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "did not converge".to_owned(), |s| format!("{s:.2} s"))
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}"))
}

fn by_method<V: std::fmt::Display>(requests: impl IntoIterator<Item = (String, V)>) -> String {
    requests
        .into_iter()
        .map(|(method, count)| format!("{method} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An operator's whole run: its peak memory, CPU and requests.
fn totals(peak_rss_mib: f64, cpu_seconds: f64, requests: &BTreeMap<String, u64>) -> String {
    format!(
        "The operator: peak RSS {peak_rss_mib:.1} MiB; CPU {cpu_seconds:.2} s for its whole run; API requests by method: {}.\n",
        by_method(requests.clone())
    )
}

pub fn markdown(report: &Report) -> String {
    let mut text = format!(
        "Machine: {}. Each operator: its own process, as the ServiceAccount bound to the ClusterRole of config/rbac, {}. Client concurrency: {}.\n\n",
        report.machine, report.operator_settings, report.client_concurrency
    );
    let _ = writeln!(
        text,
        "Each N: {} pass(es) of the operator, the floor (the same Deployments and Services from a plain client) and the fair floor (the user's MyApp creates and, beside them, a plain client with the operator's identity creating each MyApp's Deployment and Service and writing its status once); the row shows the pass with the median (a) / fair floor, the ratios column every pass.",
        report.repeat
    );
    for run in &report.operators {
        operator_section(&mut text, run);
    }
    if let Some(round) = &report.appcluster {
        let _ = write!(
            text,
            "\nAppCluster 0 -> {} (app-operator): {} to all Ready vs {} for the same Pods from a plain client (ratio {}); most Pods at once: {}.\n",
            round.size,
            seconds(round.operator_seconds),
            seconds(round.floor_seconds),
            ratio(round.ratio_to_floor),
            round.most_pods_at_once
        );
    }
    if let Some(churn) = &report.churn {
        let _ = write!(
            text,
            "\nChurn (app-operator): {} cycles of {} MyApps created, Ready and deleted; RSS after each cycle: {} MiB; last / cycle 2 = {}.\n",
            churn.rss_mib.len(),
            churn.size,
            churn
                .rss_mib
                .iter()
                .map(|r| format!("{r:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
            ratio(churn.growth()),
        );
    }
    text
}

pub fn stateful_markdown(report: &StatefulReport) -> String {
    let mut text = format!(
        "Machine: {}. The operator: `{}`, its own process, as the ServiceAccount bound to the ClusterRole of config/rbac; every Pod runs on the real node.\n\n",
        report.machine, report.operator_command
    );
    let _ = writeln!(
        text,
        "Before the passes, a 1-member EtcdCluster by the operator (not a step: the API server's warm-up after the CRDs are installed): {:.2} s to Ready.\n",
        report.warm_up_seconds
    );
    if !report.etcd.is_empty() {
        text.push_str("EtcdCluster (members' data in emptyDir): 3 members on etcd 3.5, upgraded to 3.6, scaled to 5 and back to 3; then 100 MiB written (not timed) and snapshotted to a claim, the cluster deleted (not timed) and one restored from the snapshot, whose every value is read back. A member step ends with every member Pod Ready, none terminating, etcd listing that many started voting members, each answering on the step's version (and, for the operator, its Ready condition); the backup with the EtcdBackup's `succeeded` (by hand: the snapshot Pod's success). The floor: the operator's own Pods, Services and claim, copied and handled by hand through etcd's member API, one member at a time (learner added, Pod started, promoted; member removed, Pod deleted; a Pod's image set, the leader's last; the backup Job's Pod run on its own; the restored first member, which runs `etcdutl snapshot restore`, started and the others joined to it).\n\n");
        text.push_str(&steps_table(&report.etcd));
        text.push('\n');
    }
    if !report.sampledb.is_empty() {
        text.push_str("SampleDB (PostgreSQL 15): created until it says Ready for its generation and answers `select 1` with its Secret's credentials; then about 1 GiB of rows written on both sides (not timed), backed up on demand (the annotation, until the status names the backup's Job as succeeded), restored into a new SampleDB (`spec.restore`, until it is Ready and accepts connections) and upgraded to PostgreSQL 17 (`spec.version`, until it is Ready at 17 and accepts connections). Every restored and upgraded database is read back (the row count and a digest of every row). The floor: the operator's Secret, ConfigMaps, claims, Service and StatefulSet copied and created by hand, then once PostgreSQL answers its init (or restore) Job's Pod run on its own; its backup Job's Pod run on its own; for the upgrade, the StatefulSet scaled to 0, the upgrade Job's Pod run (a dump by 15, a restore by 17), then the StatefulSet given the operator's new template.\n\n");
        text.push_str(&steps_table(&report.sampledb));
        text.push('\n');
    }
    if !report.cloudnativepg.is_empty() {
        text.push_str("Beside CloudNativePG (its release manifest, its manager built from the pinned module, PostgreSQL 15 from the same Debian packages with barman-cloud; each pass after SampleDB's): a single-instance Cluster created until its `Ready` condition and a `select 1` as its superuser; the same rows written (not timed, nor the archiving of their WAL), then an on-demand `Backup` (barman-cloud to the node's object store, uncompressed: its default) until `completed`; a new Cluster bootstrapped from it (`bootstrap.recovery`) until Ready and accepting, every row read back. app-operator's column is the SampleDB round's operator time for the same step (its backup: `pg_dump` to a claim).\n\n");
        text.push_str(&beside_table(&report.cloudnativepg));
        if let Some(usage) = &report.cloudnativepg_usage {
            let theirs = &usage.cloudnativepg;
            let _ = writeln!(
                text,
                "\nWhen the passes ended: app-operator's RSS {:.1} MiB, CloudNativePG's {:.1} MiB (its peak {:.1} MiB, its CPU {:.2} s since it started; its own metrics).",
                usage.app_operator_rss_mib, theirs.rss_mib, theirs.peak_rss_mib, theirs.cpu_seconds
            );
        }
        text.push('\n');
    }
    if let Some(rest) = &report.at_rest {
        let _ = writeln!(
            text,
            "At rest: {} databases for each operator (SampleDBs, then as many single-instance Clusters once the SampleDBs' namespace was deleted), created at once; the time until every one was Ready, then the operator's RSS and CPU over the next {:.0} s.\n\n| operator | all Ready after | RSS | CPU over the window |\n|---|---:|---:|---:|",
            rest.databases, rest.window_seconds
        );
        for (name, side) in [
            ("app-operator", &rest.app_operator),
            ("CloudNativePG", &rest.cloudnativepg),
        ] {
            let _ = writeln!(
                text,
                "| {name} | {:.1} s | {:.1} MiB | {:.2} s |",
                side.ready_seconds, side.rss_mib, side.window_cpu_seconds
            );
        }
        text.push('\n');
    }
    text.push_str(&totals(
        report.peak_rss_mib,
        report.cpu_seconds,
        &report.requests_by_method,
    ));
    text
}

/// Each pass's steps, operator beside by hand.
fn steps_table(passes: &[Vec<TimedStep>]) -> String {
    pass_table(("operator", "by hand"), passes, |step| {
        (&step.name, step.operator_seconds, step.floor_seconds)
    })
}

/// Each pass's steps, app-operator beside CloudNativePG.
fn beside_table(passes: &[Vec<Beside>]) -> String {
    pass_table(("app-operator", "CloudNativePG"), passes, |step| {
        (
            &step.name,
            step.app_operator_seconds,
            step.cloudnativepg_seconds,
        )
    })
}

/// One row per pass and step: its name, the seconds of each of the two `columns`, their ratio.
fn pass_table<S>(
    (first, second): (&str, &str),
    passes: &[Vec<S>],
    row: impl Fn(&S) -> (&str, f64, f64),
) -> String {
    let mut text = format!(
        "| pass | step | {first} | {second} | {first} / {second} |\n|---:|---|---:|---:|---:|\n"
    );
    for (index, pass) in passes.iter().enumerate() {
        for step in pass {
            let (name, a, b) = row(step);
            let _ = writeln!(
                text,
                "| {} | {name} | {a:.2} s | {b:.2} s | {:.2} |",
                index + 1,
                a / b
            );
        }
    }
    text
}

fn operator_section(text: &mut String, run: &OperatorRun) {
    let _ = write!(text, "\n### {}\n\n`{}`\n\n", run.name, run.command);
    if let Some(failure) = &run.failure {
        let _ = write!(text, "**Failed:** {failure}.");
        if run.myapp.is_empty() {
            text.push_str(" It finished no round.\n");
            return;
        }
        text.push_str(" The rounds it finished before that are below.\n\n");
    }
    text.push_str("| N MyApps | children (a) | fair floor | (a) / fair | ratios | floor | (a) / floor | all Ready (b) | fair floor Ready | all Ready | requests per MyApp | steady writes | steady reads | settled RSS |\n");
    text.push_str("|---:|---:|---:|---:|---|---:|---:|---:|---:|:--:|---|---:|---:|---:|\n");
    for round in &run.myapp {
        let Some(pass) = round.median() else {
            continue;
        };
        let _ = writeln!(
            text,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} MiB{} |",
            round.n,
            seconds(pass.children_seconds),
            seconds(pass.fair_seconds),
            ratio(pass.ratio_to_fair),
            round
                .passes
                .iter()
                .map(|p| ratio(p.ratio_to_fair))
                .collect::<Vec<_>>()
                .join(", "),
            seconds(pass.floor_seconds),
            ratio(pass.ratio_to_floor),
            seconds(pass.ready_seconds),
            seconds(pass.fair_ready_seconds),
            if round.all_ready() { "yes" } else { "no" },
            by_method(
                pass.requests_per_myapp
                    .iter()
                    .map(|(method, count)| (method.clone(), format!("{count:.2}")))
            ),
            round.at_rest.writes,
            round.at_rest.reads,
            round.at_rest.rss_mib,
            round
                .at_rest
                .rss_parts
                .map_or(String::new(), |parts| format!(
                    " ({:.1} allocated, {:.1} file)",
                    parts.anonymous_mib, parts.file_mib
                )),
        );
    }
    cpu_table(text, run);
    speed_table(text, run);
    for round in &run.myapp {
        if let Some(restart) = &round.restart {
            let _ = write!(
                text,
                "\nRestart with {} converged MyApps: ready after {:.2} s, idle after {:.2} s; {} writes; requests until idle: {}; peak RSS {:.1} MiB.\n",
                round.n,
                restart.ready_seconds,
                restart.idle_seconds,
                restart.writes(),
                by_method(restart.requests_by_method.clone()),
                restart.peak_rss_mib,
            );
        }
    }
    if run.failure.is_none() {
        text.push('\n');
        text.push_str(&totals(
            run.peak_rss_mib,
            run.cpu_seconds,
            &run.requests_by_method,
        ));
    }
}

/// Where each N's CPU went, per MyApp and process, in the operator pass and in the fair floor
/// pass: a process whose figure rises with N is where the time per MyApp grows.
fn cpu_table(text: &mut String, run: &OperatorRun) {
    let medians: Vec<(usize, &Pass)> = run
        .myapp
        .iter()
        .filter_map(|round| Some((round.n, round.median()?)))
        .collect();
    if medians.is_empty() {
        return;
    }
    let mut processes: Vec<&str> = vec![OPERATOR_CPU];
    for (_, pass) in &medians {
        for name in pass
            .cpu_ms_per_myapp
            .keys()
            .chain(pass.fair_cpu_ms_per_myapp.keys())
        {
            if !processes.contains(&name.as_str()) {
                processes.push(name.as_str());
            }
        }
    }
    let _ = write!(
        text,
        "\nCPU per MyApp, ms, by process (`/proc`; the operator's from its metrics): operator pass / fair floor pass (the operator stopped)\n\n| N MyApps | {} | all |\n|---:|{}---:|\n",
        processes.join(" | "),
        "---:|".repeat(processes.len())
    );
    for (n, pass) in medians {
        let cell = |figures: &BTreeMap<String, f64>, name: &str| {
            figures
                .get(name)
                .map_or("-".to_owned(), |ms| format!("{ms:.1}"))
        };
        let cells: Vec<String> = processes
            .iter()
            .map(|name| {
                format!(
                    "{} / {}",
                    cell(&pass.cpu_ms_per_myapp, name),
                    cell(&pass.fair_cpu_ms_per_myapp, name)
                )
            })
            .collect();
        let all = |figures: &BTreeMap<String, f64>| figures.values().sum::<f64>();
        let _ = writeln!(
            text,
            "| {n} | {} | {:.1} / {:.1} |",
            cells.join(" | "),
            all(&pass.cpu_ms_per_myapp),
            all(&pass.fair_cpu_ms_per_myapp)
        );
    }
}

/// Every pass: when the user's last create was answered beside the operator and beside the fair
/// floor (an operator that slows the API server slows the user too), how much slower the
/// machine ran in the operator pass, and the headline ratio with that divided out.
fn speed_table(text: &mut String, run: &OperatorRun) {
    if run.myapp.iter().all(|round| round.passes.is_empty()) {
        return;
    }
    text.push_str("\nEach pass: the user's last create answered, operator pass / fair floor pass; the machine's slowdown in the operator pass (kube-scheduler and kwok CPU per MyApp, the same work in both passes, operator pass over fair floor pass); (a) / fair with the slowdown divided out (a diagnostic: the headline is the plain ratio)\n\n| N MyApps | pass | (a) / fair | last create | slowdown | (a) / fair at the same speed |\n|---:|---:|---:|---|---:|---:|\n");
    for round in &run.myapp {
        for (index, pass) in round.passes.iter().enumerate() {
            let _ = writeln!(
                text,
                "| {} | {} | {} | {} / {} | {} | {} |",
                round.n,
                index + 1,
                ratio(pass.ratio_to_fair),
                seconds(pass.operator_created.total(round.n)),
                seconds(pass.fair_created.total(round.n)),
                ratio(pass.slowdown()),
                ratio(pass.ratio_to_fair_at_same_speed()),
            );
        }
    }
}

/// A round in the growth chart: N, the pass reported, the settled RSS in MiB.
type RoundAt<'a> = (f64, &'a Pass, f64);

/// The growth series as SVG: left, seconds per MyApp against N (log) for each operator's
/// children (a) and the fair floor beside it, where linear growth is a flat line; right, settled
/// RSS against N, where a constant cost per MyApp is a straight one. None with fewer than two N.
pub fn growth_chart(report: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let svg = |e| anyhow::anyhow!("{e:?}");
    // Each operator's rounds at their N, with the pass reported.
    let runs: Vec<(&str, Vec<RoundAt>)> = report
        .operators
        .iter()
        .map(|run| {
            let rounds = run
                .myapp
                .iter()
                .filter_map(|round| Some((round.n as f64, round.median()?, round.at_rest.rss_mib)))
                .collect();
            (run.name.as_str(), rounds)
        })
        .collect();
    let sizes: Vec<f64> = runs
        .iter()
        .flat_map(|(_, rounds)| rounds.iter().map(|(n, ..)| *n))
        .collect();
    let (min_n, max_n) = sizes.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), n| {
        (lo.min(*n), hi.max(*n))
    });
    if min_n >= max_n {
        return Ok(());
    }
    let per_myapp_ms = |seconds: Option<f64>, n: f64| seconds.map(|s| s * 1000.0 / n);
    let max_ms = runs
        .iter()
        .flat_map(|(_, rounds)| rounds.iter())
        .flat_map(|(n, pass, _)| {
            [pass.children_seconds, pass.fair_seconds].map(|s| per_myapp_ms(s, *n))
        })
        .flatten()
        .fold(1.0, f64::max);
    let max_rss = runs
        .iter()
        .flat_map(|(_, rounds)| rounds.iter().map(|(.., rss)| *rss))
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(svg)?;
    let (left, right) = root.split_horizontally(600);
    let mut time = ChartBuilder::on(&left)
        .caption(
            "Time per MyApp: children (a) vs the fair floor",
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((min_n * 0.8..max_n * 1.25).log_scale(), 0.0..max_ms * 1.1)
        .map_err(svg)?;
    time.configure_mesh()
        .x_desc("N MyApps")
        .y_desc("ms per MyApp")
        .draw()
        .map_err(svg)?;
    let mut memory = ChartBuilder::on(&right)
        .caption("Settled RSS", ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_n * 1.05, 0.0..max_rss * 1.1)
        .map_err(svg)?;
    memory
        .configure_mesh()
        .x_desc("N MyApps")
        .y_desc("MiB")
        .draw()
        .map_err(svg)?;
    for (index, (name, rounds)) in runs.iter().enumerate() {
        let color = Palette99::pick(index);
        let series = |seconds: fn(&Pass) -> Option<f64>| -> Vec<(f64, f64)> {
            rounds
                .iter()
                .filter_map(|(n, pass, _)| Some((*n, per_myapp_ms(seconds(pass), *n)?)))
                .collect()
        };
        let lines = [
            (
                series(|pass| pass.children_seconds),
                format!("{name}: children (a)"),
                color.stroke_width(2),
            ),
            (
                series(|pass| pass.fair_seconds),
                format!("fair floor beside {name}"),
                color.mix(0.5).stroke_width(1),
            ),
        ];
        for (points, label, style) in lines {
            time.draw_series(LineSeries::new(points.iter().copied(), style))
                .map_err(svg)?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            time.draw_series(points.iter().map(|p| Circle::new(*p, 3, style.filled())))
                .map_err(svg)?;
        }
        let rss: Vec<(f64, f64)> = rounds.iter().map(|(n, _, rss)| (*n, *rss)).collect();
        let style = color.stroke_width(2);
        memory
            .draw_series(LineSeries::new(rss.iter().copied(), style))
            .map_err(svg)?
            .label(name.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        memory
            .draw_series(rss.iter().map(|p| Circle::new(*p, 3, style.filled())))
            .map_err(svg)?;
    }
    time.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(svg)?;
    memory
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(svg)?;
    root.present().map_err(svg)?;
    Ok(())
}

/// Converged objects over time, each operator vs the fair floor, per N, as SVG: the viewer's
/// browser draws the text, so no font has to be installed to write it.
pub fn chart(report: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let medians: Vec<(&str, usize, &Pass)> = report
        .operators
        .iter()
        .flat_map(|run| {
            run.myapp
                .iter()
                .filter_map(|round| Some((run.name.as_str(), round.n, round.median()?)))
        })
        .collect();
    let max_t = medians
        .iter()
        .flat_map(|(_, _, pass)| {
            pass.operator_children
                .points
                .iter()
                .chain(&pass.fair_children.points)
                .chain(&pass.operator_ready.points)
        })
        .map(|p| p.0)
        .fold(1.0, f64::max);
    let max_n = medians.iter().map(|(_, n, _)| *n).max().unwrap_or(1);
    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "MyApps converged over time: operator vs the fair floor",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_t * 1.05, 0usize..max_n + max_n / 20)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the first create")
        .y_desc("objects converged")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    for (index, (name, n, pass)) in medians.iter().enumerate() {
        let color = Palette99::pick(index);
        let lines = [
            (
                &pass.operator_children,
                format!("N={n} {name}: Deployment+Service"),
                color.stroke_width(2),
            ),
            (
                &pass.operator_ready,
                format!("N={n} {name}: Ready"),
                color.stroke_width(1),
            ),
            (
                &pass.fair_children,
                format!("N={n} fair floor (beside {name})"),
                BLACK.mix(0.5).stroke_width(1),
            ),
        ];
        for (series, label, style) in lines {
            chart
                .draw_series(LineSeries::new(series.points.iter().copied(), style))
                .map_err(|e| anyhow::anyhow!("{e:?}"))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}
