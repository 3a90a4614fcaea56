//! SampleDB's Job scripts against real PostgreSQL servers (Debian's packages): init, backup,
//! restore, the offline snapshot and the upgrade. No Kubernetes: each script runs as its Job's
//! container would run it (`bash -c SCRIPT`, the PostgreSQL `bin` directory first on PATH, as the
//! postgres user, with exactly the environment the controller sets).

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, SystemTime};

use app_operator::controllers::sampledb::scripts::{BACKUP, INIT, RESTORE, SNAPSHOT, UPGRADE};
use testkit::postgres::{Binaries, PostgresServer, Scratch, run_script, script, transcript};

/// The superuser the controller creates (not the OS user's name: a script that forgot PGUSER
/// would connect as `postgres`, who does not exist), with a password that needs quoting.
const USER: &str = "dbadmin";
const PASSWORD: &str = "pa ss'word\"$x";
const DATABASE: &str = "appdb";

/// The rows every test writes and expects back: non-ASCII text, a quote, a NULL.
const SEED: &str = "CREATE TABLE items (id int PRIMARY KEY, name text);
    INSERT INTO items VALUES (1, 'Grüße'), (2, 'O''Brien'), (3, NULL);";
const ROWS: &str = "SELECT id, coalesce(name, '<null>') FROM items ORDER BY id";
const EXPECTED: &str = "1|Grüße\n2|O'Brien\n3|<null>";

const BACKUP_FILE: &str = "appdb-20250101T000000Z.dump";

fn ok<T>(result: io::Result<T>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

/// A running server in `<scratch>/<name>` with the database `appdb`.
fn server(scratch: &Scratch, name: &str) -> PostgresServer {
    let server = ok(PostgresServer::new(
        &scratch.path().join(name),
        USER,
        PASSWORD,
    ));
    ok(server.psql("postgres", &format!("CREATE DATABASE {DATABASE}")));
    server
}

/// [`server`] with the seed rows.
fn seeded(scratch: &Scratch, name: &str) -> PostgresServer {
    let server = server(scratch, name);
    ok(server.psql(DATABASE, SEED));
    server
}

/// Whether `appdb` has the table `name`.
fn has_table(server: &PostgresServer, name: &str) -> bool {
    let sql = format!("SELECT to_regclass('public.{name}') IS NOT NULL");
    ok(server.psql(DATABASE, &sql)) == "t"
}

/// `env` plus `extra`.
fn with(mut env: Vec<(String, String)>, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    env.extend(
        extra
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned())),
    );
    env
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The environment of the Jobs that talk to the running `server` (backup, restore).
fn online_env(server: &PostgresServer, backups: &Path, file: &str) -> Vec<(String, String)> {
    with(
        server.env(DATABASE),
        &[("BACKUP_DIR", text(backups)), ("BACKUP_FILE", file)],
    )
}

/// The environment of the offline Jobs (snapshot, upgrade): the data directory, the superuser,
/// the database, the backups, and a TMPDIR of the test's own (to see it cleaned up).
fn offline_env(data: &Path, backups: &Path, file: &str, tmp: &Path) -> Vec<(String, String)> {
    with(
        vec![],
        &[
            ("PGDATA", text(data)),
            ("PGUSER", USER),
            ("PGPASSWORD", PASSWORD),
            ("PGDATABASE", DATABASE),
            ("BACKUP_DIR", text(backups)),
            ("BACKUP_FILE", file),
            ("TMPDIR", text(tmp)),
        ],
    )
}

fn run(script_text: &str, env: Vec<(String, String)>) -> Output {
    ok(run_script(script_text, env))
}

fn succeeded(name: &str, output: &Output) -> String {
    assert!(
        output.status.success(),
        "{name} failed: {}",
        transcript(output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn failed(name: &str, output: &Output) -> String {
    assert!(
        !output.status.success(),
        "{name} succeeded, expected a failure: {}",
        transcript(output)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Fails the test, naming `what` and the names, unless `dir` is empty.
fn assert_empty(dir: &Path, what: &str) {
    let names = names(dir);
    assert!(names.is_empty(), "{what}: {names:?}");
}

/// Every file below `dir` with its size and modification time.
fn tree(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let metadata = entry.metadata().unwrap();
        if metadata.is_dir() {
            files.extend(tree(&entry.path()));
        } else {
            files.push((entry.path(), metadata.len(), metadata.modified().unwrap()));
        }
    }
    files.sort();
    files
}

/// A directory laid out as a mounted ConfigMap: the files in a hidden timestamped directory,
/// `..data` linking to it, and each name a link through `..data`.
fn config_map(dir: &Path, files: &[(&str, &str)]) {
    let version = dir.join("..2025_01_01_00_00_00.000000001");
    fs::create_dir_all(&version).unwrap();
    std::os::unix::fs::symlink(version.file_name().unwrap(), dir.join("..data")).unwrap();
    for (name, content) in files {
        fs::write(version.join(name), content).unwrap();
        std::os::unix::fs::symlink(Path::new("..data").join(name), dir.join(name)).unwrap();
    }
}

#[test]
fn init_runs_the_sql_files_in_name_order() {
    let scratch = ok(Scratch::new("init"));
    let db = server(&scratch, "db");
    let sql = scratch.path().join("sql");
    config_map(
        &sql,
        &[
            // Each needs the one before: run in another order, they fail.
            ("10-more.sql", "INSERT INTO items VALUES (3, NULL);"),
            (
                "02-rows.sql",
                "INSERT INTO items VALUES (1, 'Grüße'), (2, 'O''Brien');",
            ),
            (
                "01-schema.sql",
                "CREATE TABLE items (id int PRIMARY KEY, name text);",
            ),
            // Not SQL by its name: left alone.
            ("README.md", "this is not SQL"),
        ],
    );

    let output = run(
        INIT,
        with(db.env(DATABASE), &[("INIT_SQL_DIR", text(&sql))]),
    );
    let stdout = succeeded("init.sh", &output);

    assert_eq!(ok(db.psql(DATABASE, ROWS)), EXPECTED);
    let position = |name: &str| {
        stdout
            .find(&format!("will run {}", text(&sql.join(name))))
            .unwrap_or_else(|| panic!("init.sh did not announce {name}: {stdout}"))
    };
    assert!(position("01-schema.sql") < position("02-rows.sql"));
    assert!(position("02-rows.sql") < position("10-more.sql"));
    assert!(!stdout.contains("README.md"), "{stdout}");
}

#[test]
fn init_fails_on_an_sql_error_and_applies_nothing() {
    let scratch = ok(Scratch::new("init-error"));
    let db = server(&scratch, "db");
    let sql = scratch.path().join("sql");
    config_map(
        &sql,
        &[
            (
                "01-schema.sql",
                "CREATE TABLE items (id int PRIMARY KEY, name text);",
            ),
            ("02-bad.sql", "INSERT INTO no_such_table VALUES (1);"),
            ("03-never.sql", "CREATE TABLE never (id int);"),
        ],
    );

    let output = run(
        INIT,
        with(db.env(DATABASE), &[("INIT_SQL_DIR", text(&sql))]),
    );
    let stderr = failed("init.sh with a failing file", &output);

    assert!(
        stderr.contains("02-bad.sql"),
        "the error does not name the file: {stderr}"
    );
    assert!(stderr.contains("no_such_table"), "{stderr}");
    assert!(
        !has_table(&db, "items"),
        "the file before the failing one was applied"
    );
    assert!(!has_table(&db, "never"), "a file after the failing one ran");
}

#[test]
fn init_without_sql_only_checks_the_connection() {
    let scratch = ok(Scratch::new("init-none"));
    let db = server(&scratch, "db");
    let empty = ok(scratch.dir("empty"));
    let absent = scratch.path().join("absent");

    for (case, extra) in [
        ("INIT_SQL_DIR unset", vec![]),
        (
            "an empty INIT_SQL_DIR",
            vec![("INIT_SQL_DIR", text(&empty))],
        ),
        (
            "an absent INIT_SQL_DIR",
            vec![("INIT_SQL_DIR", text(&absent))],
        ),
    ] {
        let stdout = succeeded(
            &format!("init.sh with {case}"),
            &run(INIT, with(db.env(DATABASE), &extra)),
        );
        assert!(stdout.contains("connected (PostgreSQL"), "{case}: {stdout}");
        assert!(stdout.contains("no init SQL to run"), "{case}: {stdout}");
    }

    // The check is real: a wrong password fails the Job.
    let output = run(INIT, with(db.env(DATABASE), &[("PGPASSWORD", "wrong")]));
    let stderr = failed("init.sh with a wrong password", &output);
    assert!(
        stderr.contains(&format!("cannot connect to database {DATABASE}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );
}

#[test]
fn init_waits_for_the_server() {
    let scratch = ok(Scratch::new("init-wait"));
    let mut db = ok(PostgresServer::create(
        &scratch.path().join("db"),
        USER,
        PASSWORD,
    ));
    let sql = scratch.path().join("sql");
    config_map(&sql, &[("01.sql", SEED)]);

    // The server starts after the Job: the database is created by the server's own start in a
    // real Pod; here the Job targets `postgres`, which initdb made.
    let env = with(db.env("postgres"), &[("INIT_SQL_DIR", text(&sql))]);
    let mut job = ok(script(INIT, env));
    let job = job
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    ok(db.start());
    let output = job.wait_with_output().unwrap();

    let stdout = succeeded("init.sh started before the server", &output);
    assert!(stdout.contains("waiting up to 60 s"), "{stdout}");
    assert_eq!(ok(db.psql("postgres", ROWS)), EXPECTED);
}

#[test]
fn backup_then_restore_into_a_fresh_server() {
    let scratch = ok(Scratch::new("backup"));
    let source = seeded(&scratch, "source");
    let backups = ok(scratch.dir("backups"));

    let output = run(BACKUP, online_env(&source, &backups, BACKUP_FILE));
    succeeded("backup.sh", &output);
    assert_eq!(
        names(&backups),
        [BACKUP_FILE],
        "exactly the backup, no partial file"
    );
    let dump = fs::read(backups.join(BACKUP_FILE)).unwrap();
    assert!(
        dump.starts_with(b"PGDMP"),
        "not a pg_dump custom-format archive"
    );

    // A fresh server whose database already has other contents: restore replaces them.
    let target = server(&scratch, "target");
    ok(target.psql(DATABASE, "CREATE TABLE leftover (id int)"));
    let output = run(RESTORE, online_env(&target, &backups, BACKUP_FILE));
    succeeded("restore.sh", &output);

    assert_eq!(ok(target.psql(DATABASE, ROWS)), EXPECTED);
    assert!(
        !has_table(&target, "leftover"),
        "restore kept what the database held before"
    );
}

#[test]
fn a_failed_backup_leaves_no_file() {
    let scratch = ok(Scratch::new("backup-fail"));
    let mut source = seeded(&scratch, "source");
    let backups = ok(scratch.dir("backups"));
    let env = online_env(&source, &backups, BACKUP_FILE);
    ok(source.stop());

    let stderr = failed("backup.sh against a stopped server", &run(BACKUP, env));

    assert!(stderr.contains("no backup was written"), "{stderr}");
    assert_empty(&backups, "files left behind");
}

/// The message a failed restore ends with (and leaves as its container's termination message,
/// which the SampleDB's condition shows) must carry PostgreSQL's own reason, not "see the error
/// above".
#[test]
fn a_restore_postgres_refuses_ends_with_its_error() {
    let scratch = ok(Scratch::new("restore-refused"));
    let source = seeded(&scratch, "source");
    // Roles are not in a dump: a grant to one the target lacks cannot be restored.
    ok(source.psql(
        DATABASE,
        "CREATE ROLE reader; GRANT SELECT ON items TO reader",
    ));
    let backups = ok(scratch.dir("backups"));
    succeeded(
        "backup.sh",
        &run(BACKUP, online_env(&source, &backups, BACKUP_FILE)),
    );
    let target = server(&scratch, "target");

    let output = run(RESTORE, online_env(&target, &backups, BACKUP_FILE));
    let stderr = failed("restore.sh of a grant to a missing role", &output);

    let last = stderr.lines().rev().find(|line| !line.trim().is_empty());
    assert!(
        last.is_some_and(|line| line.contains(r#"role "reader" does not exist"#)),
        "the last line must quote PostgreSQL: {stderr}"
    );
}

#[test]
fn restore_of_a_missing_file_fails_naming_it() {
    let scratch = ok(Scratch::new("restore-missing"));
    let db = seeded(&scratch, "db");
    let backups = ok(scratch.dir("backups"));

    let output = run(RESTORE, online_env(&db, &backups, "missing.dump"));
    let stderr = failed("restore.sh of a missing file", &output);

    let path = backups.join("missing.dump");
    assert!(
        stderr.contains(&format!("{} not found", path.display())),
        "{stderr}"
    );
    assert_eq!(
        ok(db.psql(DATABASE, ROWS)),
        EXPECTED,
        "the database was touched"
    );
}

#[test]
fn snapshot_of_the_stopped_data_dir_restores_into_a_fresh_server() {
    let scratch = ok(Scratch::new("snapshot"));
    let mut source = seeded(&scratch, "source");
    let backups = ok(scratch.dir("backups"));
    let tmp = ok(scratch.dir("tmp"));
    ok(source.stop());
    // A server that listened on the configured TCP address would fail to start: 192.0.2.1
    // (TEST-NET-1) is no address of this machine. The snapshot's server must listen on none.
    let conf = source.data_dir().join("postgresql.conf");
    let mut settings = fs::read_to_string(&conf).unwrap();
    settings.push_str("\nlisten_addresses = '192.0.2.1'\n");
    fs::write(&conf, settings).unwrap();
    let pid_file = source.data_dir().join("postmaster.pid");

    // A failing dump (no such database) still stops the temporary server and leaves nothing.
    let mut env = offline_env(source.data_dir(), &backups, BACKUP_FILE, &tmp);
    env.push(("PGDATABASE".to_owned(), "nosuchdb".to_owned()));
    let stderr = failed("snapshot.sh of a missing database", &run(SNAPSHOT, env));
    assert!(stderr.contains("no snapshot was written"), "{stderr}");
    assert!(!pid_file.exists(), "the temporary server still runs");
    assert_empty(&backups, "files left behind");
    assert_empty(&tmp, "temporary files left behind");

    let output = run(
        SNAPSHOT,
        offline_env(source.data_dir(), &backups, BACKUP_FILE, &tmp),
    );
    let stdout = succeeded("snapshot.sh", &output);
    assert!(stdout.contains("no TCP address"), "{stdout}");
    assert!(!pid_file.exists(), "the temporary server still runs");
    assert_eq!(
        names(&backups),
        [BACKUP_FILE],
        "exactly the snapshot, no partial file"
    );
    assert_empty(&tmp, "temporary files left behind");

    let target = server(&scratch, "target");
    let output = run(RESTORE, online_env(&target, &backups, BACKUP_FILE));
    succeeded("restore.sh of the snapshot", &output);
    assert_eq!(ok(target.psql(DATABASE, ROWS)), EXPECTED);
}

/// A seeded server's data directory, offline, and its snapshot in `backups` (the upgrade Job's
/// init container).
fn snapshotted(scratch: &Scratch) -> (PostgresServer, PathBuf, PathBuf) {
    let mut db = seeded(scratch, "db");
    let backups = ok(scratch.dir("backups"));
    let tmp = ok(scratch.dir("tmp"));
    ok(db.stop());
    succeeded(
        "snapshot.sh",
        &run(
            SNAPSHOT,
            offline_env(db.data_dir(), &backups, BACKUP_FILE, &tmp),
        ),
    );
    (db, backups, tmp)
}

#[test]
fn upgrade_within_a_major_changes_nothing() {
    let scratch = ok(Scratch::new("upgrade-minor"));
    let (mut db, backups, tmp) = snapshotted(&scratch);
    let dir = scratch.path().join("db");
    let (before, siblings) = (tree(db.data_dir()), names(&dir));

    let output = run(
        UPGRADE,
        offline_env(db.data_dir(), &backups, BACKUP_FILE, &tmp),
    );
    let stdout = succeeded("upgrade.sh within a major", &output);

    assert!(stdout.contains("no data conversion needed"), "{stdout}");
    assert_eq!(tree(db.data_dir()), before, "the data directory changed");
    assert_eq!(
        names(&dir),
        siblings,
        "upgrade.sh made directories next to the data"
    );
    ok(db.start());
    assert_eq!(ok(db.psql(DATABASE, ROWS)), EXPECTED);
}

#[test]
fn upgrade_across_majors_converts_through_the_dump() {
    let scratch = ok(Scratch::new("upgrade-major"));
    let (db, backups, tmp) = snapshotted(&scratch);
    let dir = scratch.path().join("db");
    let data = db.data_dir().to_owned();
    drop(db);
    // Only one major is installed: the data directory claims an older one. upgrade.sh never starts
    // a server on it (this one could not start), it only moves it aside.
    let new_major = ok(Binaries::get()).major;
    let old_major = new_major - 1;
    fs::write(data.join("PG_VERSION"), format!("{old_major}\n")).unwrap();
    fs::write(data.join("OLD_DATA_MARKER"), "").unwrap();
    let aside = dir.join(format!("data-{old_major}"));
    let before = names(&dir);

    // Without its dump, nothing is touched.
    let output = run(UPGRADE, offline_env(&data, &backups, "missing.dump", &tmp));
    let stderr = failed("upgrade.sh without a dump", &output);
    assert!(
        stderr.contains(&format!(
            "{} not found",
            backups.join("missing.dump").display()
        )),
        "{stderr}"
    );
    assert_eq!(
        names(&dir),
        before,
        "upgrade.sh without a dump changed the layout"
    );

    let output = run(UPGRADE, offline_env(&data, &backups, BACKUP_FILE, &tmp));
    let stdout = succeeded("upgrade.sh across majors", &output);
    assert!(
        stdout.contains(&format!("from PostgreSQL {old_major} to {new_major}")),
        "{stdout}"
    );
    // The old directory, only moved; the new one in its place; nothing else left.
    assert_eq!(
        fs::read_to_string(aside.join("PG_VERSION")).unwrap().trim(),
        old_major.to_string()
    );
    assert!(
        aside.join("OLD_DATA_MARKER").exists(),
        "{} is not the old data",
        aside.display()
    );
    assert_eq!(
        fs::read_to_string(data.join("PG_VERSION")).unwrap().trim(),
        new_major.to_string()
    );
    assert!(!data.join("OLD_DATA_MARKER").exists());
    let mut expected = before.clone();
    expected.push(format!("data-{old_major}"));
    expected.sort();
    assert_eq!(names(&dir), expected);
    assert_empty(&tmp, "temporary files left behind");

    let mut upgraded = ok(PostgresServer::existing(&dir, USER, PASSWORD));
    ok(upgraded.start());
    assert_eq!(ok(upgraded.psql(DATABASE, ROWS)), EXPECTED);
    let version = ok(upgraded.psql(
        DATABASE,
        "SELECT current_setting('server_version_num')::int / 10000",
    ));
    assert_eq!(version, new_major.to_string());
    // The superuser's password is PGPASSWORD, and the old access rules (passwords) hold.
    let refused = upgraded.psql_with(DATABASE, "wrong", "SELECT 1");
    assert!(refused.is_err(), "a wrong password was accepted");

    // Interrupted between moving the old directory aside and the new one into place: a rerun
    // finishes the swap.
    ok(upgraded.stop());
    let ready = dir.join(format!("data-{new_major}.ready"));
    fs::rename(&data, &ready).unwrap();
    let output = run(UPGRADE, offline_env(&data, &backups, BACKUP_FILE, &tmp));
    let stdout = succeeded("upgrade.sh after an interrupted swap", &output);
    assert!(stdout.contains("finishing it"), "{stdout}");
    assert!(!ready.exists());
    ok(upgraded.start());
    assert_eq!(ok(upgraded.psql(DATABASE, ROWS)), EXPECTED);
}
