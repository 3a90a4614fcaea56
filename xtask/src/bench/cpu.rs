//! CPU time of the processes that do a pass's work, read from `/proc`: where the machine's two
//! cores went for N MyApps, and which process's share per MyApp grows with N.

use std::collections::BTreeMap;

/// The local control plane's processes, by the kernel's name for them (`comm`: the program's
/// file name, cut to 15 bytes), and the name they are reported under.
const CONTROL_PLANE: [(&str, &str); 5] = [
    ("kube-apiserver", "kube-apiserver"),
    ("etcd", "etcd"),
    ("kube-controller", "kube-controller-manager"),
    ("kube-scheduler", "kube-scheduler"),
    ("kwok", "kwok"),
];

/// What the bench's own process (the user's creates, the watches that time the pass, the floors'
/// client) is reported under.
pub const BENCH_CLIENT: &str = "bench client";

/// USER_HZ, the unit of `/proc/<pid>/stat`'s times: 100 on Linux whatever the kernel's own HZ
/// (what `sysconf(_SC_CLK_TCK)` answers).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds used so far by each control-plane process and by this one, by reported name.
pub fn sample() -> BTreeMap<String, f64> {
    let mut seconds = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return seconds;
    };
    for entry in entries.flatten() {
        let pid = entry.file_name();
        if !pid.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((comm, ticks)) = parse_stat(&stat) else {
            continue;
        };
        if let Some((_, name)) = CONTROL_PLANE.iter().find(|(c, _)| *c == comm) {
            *seconds.entry((*name).to_owned()).or_insert(0.0) += ticks as f64 / TICKS_PER_SECOND;
        }
    }
    if let Some((_, ticks)) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(parse_stat)
    {
        seconds.insert(BENCH_CLIENT.to_owned(), ticks as f64 / TICKS_PER_SECOND);
    }
    seconds
}

/// Milliseconds per MyApp each process used between two samples.
pub fn per_myapp_ms(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    n: usize,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(name, seconds)| {
            let used = seconds - before.get(name).copied().unwrap_or(0.0);
            (name.clone(), used * 1000.0 / n.max(1) as f64)
        })
        .collect()
}

/// The processes whose work per MyApp is the same whichever operator (or floor) runs: one Pod
/// scheduled, one Pod run by kwok.
const SAME_WORK: [&str; 2] = ["kube-scheduler", "kwok"];

/// How much more CPU that same work took per MyApp in the pass measured `slower` than in the
/// pass measured `faster`: above 1, the machine ran slower then (this VM's speed drifts from
/// minute to minute, and every process's figure moves with it). None if either lacks a figure.
pub fn slowdown(slower: &BTreeMap<String, f64>, faster: &BTreeMap<String, f64>) -> Option<f64> {
    let same_work = |figures: &BTreeMap<String, f64>| -> Option<f64> {
        SAME_WORK.iter().map(|name| figures.get(*name)).sum()
    };
    let (slower, faster) = (same_work(slower)?, same_work(faster)?);
    (faster > 0.0).then(|| slower / faster)
}

/// The command name and `utime + stime` (ticks) of one `/proc/<pid>/stat`: `pid (comm) state …`,
/// where the name may itself hold spaces and parentheses, so the fields are counted from the
/// last `)`.
fn parse_stat(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    let mut fields = stat.get(close + 1..)?.split_whitespace();
    // After the name: state, ppid, pgrp, session, tty_nr, tpgid, flags, minflt, cminflt,
    // majflt, cmajflt, then utime and stime.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((comm, utime + stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_name_and_cpu_ticks() {
        let stat =
            "4242 (kube-apiserver) S 1 4242 4242 0 -1 4194560 91 0 0 0 1234 567 0 0 20 0 12 0";
        assert_eq!(parse_stat(stat), Some(("kube-apiserver", 1801)));
        // A name with a space and a parenthesis of its own.
        let odd = "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 10 5 0 0 20 0";
        assert_eq!(parse_stat(odd), Some(("a (b) c", 15)));
        assert_eq!(parse_stat("7 (short) R 1"), None);
    }

    #[test]
    fn the_cpu_between_two_samples_is_divided_among_the_myapps() {
        let before = BTreeMap::from([("etcd".to_owned(), 1.0)]);
        let after = BTreeMap::from([("etcd".to_owned(), 3.0), ("kwok".to_owned(), 0.5)]);
        let per = per_myapp_ms(&before, &after, 1000);
        assert_eq!(per.get("etcd"), Some(&2.0));
        assert_eq!(per.get("kwok"), Some(&0.5));
    }

    #[test]
    fn the_same_work_taking_more_cpu_is_a_slower_machine() {
        let fair = BTreeMap::from([
            ("kube-scheduler".to_owned(), 1.5),
            ("kwok".to_owned(), 2.5),
            ("kube-apiserver".to_owned(), 30.0),
        ]);
        let pass = BTreeMap::from([
            ("kube-scheduler".to_owned(), 2.0),
            ("kwok".to_owned(), 3.0),
            ("kube-apiserver".to_owned(), 60.0),
        ]);
        assert_eq!(slowdown(&pass, &fair), Some(1.25));
        assert_eq!(slowdown(&fair, &fair), Some(1.0));
        let without_kwok = BTreeMap::from([("kube-scheduler".to_owned(), 2.0)]);
        assert_eq!(slowdown(&without_kwok, &fair), None);
    }

    /// This process is always there to be read, so a sample that finds nothing is a broken
    /// reader, not an idle machine.
    #[test]
    fn a_sample_reads_this_process() {
        assert!(sample().contains_key(BENCH_CLIENT));
    }
}
