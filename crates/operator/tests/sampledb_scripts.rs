//! SampleDB's Job scripts against real PostgreSQL servers (Debian's packages): init, backup,
//! restore, the offline snapshot and the upgrade. No Kubernetes: each test builds the Job the
//! controller builds (`children`) and runs one of its containers as the kubelet would start it
//! (its command, `bash -c SCRIPT`, with the PostgreSQL `bin` directory first on PATH, as the
//! postgres user), with the environment the container's spec gives it ([`Node::env`]): only the
//! server's address and the volumes' paths are the test's own.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, SystemTime};

use app_operator::controllers::sampledb::children::{self, DATABASE};
use app_operator_api::SampleDB;
use app_operator_api::sampledb::{InitSql, Restore, SampleDBSpec};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvFromSource, EnvVarSource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use testkit::postgres::{Binaries, PostgresServer, Scratch, run_script, script, transcript};

/// The superuser, in a Secret of the user's (`spec.credentials.secretName`): not the generated
/// Secret's `postgres`, the OS user's name, as whom a script that forgot PGUSER would connect
/// (here that user does not exist). Its password needs quoting.
const SECRET: &str = "db-superuser";
const USER: &str = "dbadmin";
const PASSWORD: &str = "pa ss'word\"$x";

/// The rows every test writes and expects back: non-ASCII text, a quote, a NULL.
const SEED: &str = "CREATE TABLE items (id int PRIMARY KEY, name text);
    INSERT INTO items VALUES (1, 'Grüße'), (2, 'O''Brien'), (3, NULL);";
const ROWS: &str = "SELECT id, coalesce(name, '<null>') FROM items ORDER BY id";
const EXPECTED: &str = "1|Grüße\n2|O'Brien\n3|<null>";

fn ok<T>(result: io::Result<T>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

/// The SampleDB whose Jobs the tests run.
fn sample_db() -> SampleDB {
    let spec: SampleDBSpec = serde_json::from_value(serde_json::json!({
        "version": "17",
        "credentials": { "secretName": SECRET },
    }))
    .unwrap();
    let mut db = SampleDB::new("db", spec);
    db.metadata.namespace = Some("default".to_owned());
    db.metadata.uid = Some("6f1c2e0a-7d3b-4c5e-9a8f-0b1c2d3e4f50".to_owned());
    db
}

fn owner(db: &SampleDB) -> OwnerReference {
    db.controller_owner_ref(&()).unwrap()
}

/// The init Job, with an init SQL ConfigMap when `sql`.
fn init_job(sql: bool) -> Job {
    let mut db = sample_db();
    db.spec.init_sql = sql.then(|| InitSql {
        config_map_name: "db-init".to_owned(),
    });
    children::first_job(&db, &owner(&db), None)
}

/// The restore Job of a SampleDB created from `file`.
fn restore_job(file: &str) -> Job {
    let mut db = sample_db();
    db.spec.restore = Some(Restore {
        backup_file: Some(file.to_owned()),
        source: None,
        s3: None,
        point_in_time: None,
    });
    children::first_job(&db, &owner(&db), None)
}

fn backup_job() -> Job {
    let db = sample_db();
    let tick = "2025-01-01T00:00:00Z".parse().unwrap();
    children::backup_job(&db, &owner(&db), &db.spec.version, tick, None, None)
}

fn upgrade_job(from: &str, to: &str) -> Job {
    let db = sample_db();
    children::upgrade_job(&db, &owner(&db), from, to)
}

fn final_snapshot_job() -> Job {
    let db = sample_db();
    let uid = db.metadata.uid.as_deref().unwrap();
    children::final_snapshot_job(&db, uid, &db.spec.version)
}

/// The file a backup, snapshot or upgrade `job` writes (and the restore of it reads).
fn dump_file(job: &Job) -> String {
    children::dump_file(&job.name_any())
}

/// The container `name` of `job` (an init container or not).
fn container<'a>(job: &'a Job, name: &str) -> &'a Container {
    let pod = job
        .spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
        .unwrap();
    pod.init_containers
        .iter()
        .flatten()
        .chain(&pod.containers)
        .find(|container| container.name == name)
        .unwrap_or_else(|| panic!("Job {} has no container {name}", job.name_any()))
}

/// The script `container` runs: its command must be `bash -c SCRIPT`.
fn script_of(container: &Container) -> &str {
    match (container.command.as_deref(), &container.args) {
        (Some([bash, c, script]), None) if bash == "bash" && c == "-c" => script,
        (command, args) => panic!(
            "container {} runs {command:?} {args:?}, not bash -c SCRIPT",
            container.name
        ),
    }
}

/// What a Job's Pod gets from the cluster and its node, here: the Secrets' values, the
/// ConfigMaps, a directory standing in for each volume, and a TMPDIR for the tests that look for
/// what a script leaves behind.
#[derive(Clone)]
struct Node {
    /// `(Secret, key)` → value.
    secrets: BTreeMap<(String, String), String>,
    config_maps: Vec<ConfigMap>,
    /// Volume name → its directory.
    volumes: BTreeMap<String, PathBuf>,
    tmpdir: Option<PathBuf>,
}

impl Node {
    /// The credentials Secret ([`USER`], [`PASSWORD`]), the connection ConfigMap pointing at
    /// `server`, `<scratch>/backups` as the backups volume and `server`'s directory as the data
    /// volume (its data directory is below it, where PGDATA has it).
    fn new(scratch: &Scratch, server: &PostgresServer) -> Node {
        let key = |key: &str| (SECRET.to_owned(), key.to_owned());
        Node {
            secrets: BTreeMap::from([
                (key("username"), USER.to_owned()),
                (key("password"), PASSWORD.to_owned()),
            ]),
            config_maps: vec![connection(server)],
            volumes: BTreeMap::from([
                ("backups".to_owned(), ok(scratch.dir("backups"))),
                (
                    "data".to_owned(),
                    server.data_dir().parent().unwrap().to_owned(),
                ),
            ]),
            tmpdir: None,
        }
    }

    fn volume(mut self, name: &str, dir: &Path) -> Node {
        self.volumes.insert(name.to_owned(), dir.to_owned());
        self
    }

    fn tmpdir(mut self, dir: &Path) -> Node {
        self.tmpdir = Some(dir.to_owned());
        self
    }

    fn backups(&self) -> &Path {
        &self.volumes["backups"]
    }

    /// The environment `container` runs with, made as the kubelet makes it: `envFrom`, then
    /// `env` over it; then each value under one of the container's mounts moved to the directory
    /// standing in for that volume. Whatever it cannot resolve fails the test, so a new kind of
    /// env in the Job is not silently left out.
    fn env(&self, container: &Container) -> BTreeMap<String, String> {
        let what = &container.name;
        let mut env = BTreeMap::new();
        for source in container.env_from.iter().flatten() {
            match source {
                EnvFromSource {
                    config_map_ref: Some(config_map),
                    prefix: None,
                    secret_ref: None,
                } => env.extend(self.config_map(&config_map.name)),
                other => panic!("{what}: envFrom {other:?} is not resolved by this test"),
            }
        }
        for var in container.env.iter().flatten() {
            let value = match &var.value_from {
                None => {
                    let value = var.value.clone().unwrap_or_default();
                    // The kubelet expands `$(NAME)` in a value; this test does not.
                    assert!(
                        !value.contains("$("),
                        "{what}: {}={value} refers to a variable, not resolved by this test",
                        var.name
                    );
                    value
                }
                Some(EnvVarSource {
                    secret_key_ref: Some(key),
                    config_map_key_ref: None,
                    field_ref: None,
                    file_key_ref: None,
                    resource_field_ref: None,
                }) => self
                    .secrets
                    .get(&(key.name.clone(), key.key.clone()))
                    .unwrap_or_else(|| {
                        panic!(
                            "{what}: {} reads {}/{}, a Secret key the test does not have",
                            var.name, key.name, key.key
                        )
                    })
                    .clone(),
                Some(other) => panic!(
                    "{what}: {} from {other:?} is not resolved by this test",
                    var.name
                ),
            };
            env.insert(var.name.clone(), value);
        }
        let mut env: BTreeMap<String, String> = env
            .into_iter()
            .map(|(name, value)| {
                let value = self.remap(container, &name, value);
                (name, value)
            })
            .collect();
        // The kubelet sets no TMPDIR (mktemp uses /tmp): one of the test's own shows leftovers.
        if let Some(tmp) = &self.tmpdir {
            env.insert("TMPDIR".to_owned(), text(tmp).to_owned());
        }
        env
    }

    fn config_map(&self, name: &str) -> BTreeMap<String, String> {
        let config_map = self
            .config_maps
            .iter()
            .find(|config_map| config_map.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no ConfigMap {name} in the test"));
        config_map.data.clone().unwrap_or_default()
    }

    /// `value` moved from below the container's mount to below the directory standing in for
    /// its volume; unchanged when it is no path below a mount.
    fn remap(&self, container: &Container, name: &str, value: String) -> String {
        let mounts = container.volume_mounts.iter().flatten();
        let Some(mount) = mounts
            .filter(|mount| Path::new(&value).starts_with(&mount.mount_path))
            .max_by_key(|mount| mount.mount_path.len())
        else {
            return value;
        };
        assert!(
            mount.sub_path.is_none() && mount.sub_path_expr.is_none(),
            "{}: the mount of {} has a subPath, not resolved by this test",
            container.name,
            mount.name
        );
        let dir = self.volumes.get(&mount.name).unwrap_or_else(|| {
            panic!(
                "{}: {name}={value} is on the volume {}, which the test has no directory for",
                container.name, mount.name
            )
        });
        let below = Path::new(&value).strip_prefix(&mount.mount_path).unwrap();
        if below.as_os_str().is_empty() {
            text(dir).to_owned()
        } else {
            text(&dir.join(below)).to_owned()
        }
    }

    /// Runs the container `name` of `job` to its end.
    fn run(&self, job: &Job, name: &str) -> Output {
        let container = container(job, name);
        ok(run_script(script_of(container), self.env(container)))
    }
}

/// The connection ConfigMap the controller builds, pointing at `server`: outside Kubernetes
/// PGHOST, the Service's name, resolves to nothing, and each test's server listens on a port of
/// its own (several run at once), not PGPORT's 5432.
fn connection(server: &PostgresServer) -> ConfigMap {
    let db = sample_db();
    let mut config_map = children::connection(&db, &owner(&db));
    let data = config_map.data.as_mut().unwrap();
    for (name, value) in server.env(DATABASE) {
        if name == "PGHOST" || name == "PGPORT" {
            let before = data.insert(name.clone(), value);
            assert!(before.is_some(), "the connection ConfigMap has no {name}");
        }
    }
    config_map
}

/// A running server in `<scratch>/<name>` with the Jobs' database.
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

/// Whether the Jobs' database has the table `name`.
fn has_table(server: &PostgresServer, name: &str) -> bool {
    let sql = format!("SELECT to_regclass('public.{name}') IS NOT NULL");
    ok(server.psql(DATABASE, &sql)) == "t"
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
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

    let node = Node::new(&scratch, &db).volume("init-sql", &sql);
    let stdout = succeeded("init.sh", &node.run(&init_job(true), "init"));

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

    let node = Node::new(&scratch, &db).volume("init-sql", &sql);
    let output = node.run(&init_job(true), "init");
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
    let node = Node::new(&scratch, &db);
    let empty = ok(scratch.dir("empty"));
    let absent = scratch.path().join("absent");

    for (case, job, node) in [
        ("no spec.initSql", init_job(false), node.clone()),
        (
            "an empty INIT_SQL_DIR",
            init_job(true),
            node.clone().volume("init-sql", &empty),
        ),
        (
            "an absent INIT_SQL_DIR",
            init_job(true),
            node.clone().volume("init-sql", &absent),
        ),
    ] {
        let stdout = succeeded(&format!("init.sh with {case}"), &node.run(&job, "init"));
        assert!(stdout.contains("connected (PostgreSQL"), "{case}: {stdout}");
        assert!(stdout.contains("no init SQL to run"), "{case}: {stdout}");
    }

    // The check is real: a wrong password fails the Job.
    let mut wrong = node;
    wrong.secrets.insert(
        (SECRET.to_owned(), "password".to_owned()),
        "wrong".to_owned(),
    );
    let output = wrong.run(&init_job(false), "init");
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
    let mut db = server(&scratch, "db");
    let sql = scratch.path().join("sql");
    config_map(&sql, &[("01.sql", SEED)]);

    // The server (with the database, which the image creates at its first start) starts after
    // the Job.
    ok(db.stop());
    let node = Node::new(&scratch, &db).volume("init-sql", &sql);
    let job = init_job(true);
    let init = container(&job, "init");
    let mut job = ok(script(script_of(init), node.env(init)));
    let job = job
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The script's time alone with no server (it must retry, not fail): nothing is watched; its
    // output below says it waited.
    std::thread::sleep(Duration::from_secs(3));
    ok(db.start());
    let output = job.wait_with_output().unwrap();

    let stdout = succeeded("init.sh started before the server", &output);
    assert!(stdout.contains("waiting up to 60 s"), "{stdout}");
    assert_eq!(ok(db.psql(DATABASE, ROWS)), EXPECTED);
}

#[test]
fn backup_then_restore_into_a_fresh_server() {
    let scratch = ok(Scratch::new("backup"));
    let source = seeded(&scratch, "source");
    let node = Node::new(&scratch, &source);
    let backups = node.backups();
    let backup = backup_job();
    let file = dump_file(&backup);

    succeeded("backup.sh", &node.run(&backup, "backup"));
    assert_eq!(
        names(backups),
        [file.as_str()],
        "exactly the backup, no partial file"
    );
    let dump = fs::read(backups.join(&file)).unwrap();
    assert!(
        dump.starts_with(b"PGDMP"),
        "not a pg_dump custom-format archive"
    );

    // A fresh server whose database already has other contents: restore replaces them.
    let target = server(&scratch, "target");
    ok(target.psql(DATABASE, "CREATE TABLE leftover (id int)"));
    let output = Node::new(&scratch, &target).run(&restore_job(&file), "restore");
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
    let node = Node::new(&scratch, &source);
    ok(source.stop());

    let output = node.run(&backup_job(), "backup");
    let stderr = failed("backup.sh against a stopped server", &output);

    assert!(stderr.contains("no backup was written"), "{stderr}");
    // The last line (the termination message the condition quotes) says why: pg_dump's error.
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("pg_dump of database app failed: pg_dump: error: connection to server"),
        "{last}"
    );
    assert_empty(node.backups(), "files left behind");
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
    let backup = backup_job();
    succeeded(
        "backup.sh",
        &Node::new(&scratch, &source).run(&backup, "backup"),
    );
    let target = server(&scratch, "target");

    let output = Node::new(&scratch, &target).run(&restore_job(&dump_file(&backup)), "restore");
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
    let node = Node::new(&scratch, &db);

    let output = node.run(&restore_job("missing.dump"), "restore");
    let stderr = failed("restore.sh of a missing file", &output);

    let path = node.backups().join("missing.dump");
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
    let tmp = ok(scratch.dir("tmp"));
    let node = Node::new(&scratch, &source).tmpdir(&tmp);
    let backups = node.backups();
    let snapshot = final_snapshot_job();
    ok(source.stop());
    // A server that listened on the configured TCP address would fail to start: 192.0.2.1
    // (TEST-NET-1) is no address of this machine. The snapshot's server must listen on none.
    let conf = source.data_dir().join("postgresql.conf");
    let mut settings = fs::read_to_string(&conf).unwrap();
    settings.push_str("\nlisten_addresses = '192.0.2.1'\n");
    fs::write(&conf, settings).unwrap();
    let pid_file = source.data_dir().join("postmaster.pid");

    // A failing dump (a data directory without the database) still stops the temporary server
    // and leaves nothing.
    let bare = ok(PostgresServer::create(
        &scratch.path().join("bare"),
        USER,
        PASSWORD,
    ));
    let output = Node::new(&scratch, &bare)
        .tmpdir(&tmp)
        .run(&snapshot, "final-snapshot");
    let stderr = failed("snapshot.sh of a missing database", &output);
    assert!(stderr.contains("no snapshot was written"), "{stderr}");
    assert!(
        !bare.data_dir().join("postmaster.pid").exists(),
        "the temporary server still runs"
    );
    assert_empty(backups, "files left behind");
    assert_empty(&tmp, "temporary files left behind");

    let stdout = succeeded("snapshot.sh", &node.run(&snapshot, "final-snapshot"));
    assert!(stdout.contains("no TCP address"), "{stdout}");
    assert!(!pid_file.exists(), "the temporary server still runs");
    let file = dump_file(&snapshot);
    assert_eq!(
        names(backups),
        [file.as_str()],
        "exactly the snapshot, no partial file"
    );
    assert_empty(&tmp, "temporary files left behind");

    let target = server(&scratch, "target");
    let output = Node::new(&scratch, &target).run(&restore_job(&file), "restore");
    succeeded("restore.sh of the snapshot", &output);
    assert_eq!(ok(target.psql(DATABASE, ROWS)), EXPECTED);
}

/// A seeded server's data directory, offline, and its snapshot by `upgrade`'s init container;
/// the node its containers run on, with a TMPDIR.
fn snapshotted(scratch: &Scratch, upgrade: &Job) -> (PostgresServer, Node, PathBuf) {
    let mut db = seeded(scratch, "db");
    let tmp = ok(scratch.dir("tmp"));
    ok(db.stop());
    let node = Node::new(scratch, &db).tmpdir(&tmp);
    succeeded("snapshot.sh", &node.run(upgrade, "dump"));
    (db, node, tmp)
}

#[test]
fn upgrade_within_a_major_changes_nothing() {
    let scratch = ok(Scratch::new("upgrade-minor"));
    let major = ok(Binaries::get()).major;
    let upgrade = upgrade_job(&format!("{major}.1"), &format!("{major}.2"));
    let (mut db, node, _) = snapshotted(&scratch, &upgrade);
    let dir = scratch.path().join("db");
    let (before, siblings) = (tree(db.data_dir()), names(&dir));

    let stdout = succeeded("upgrade.sh within a major", &node.run(&upgrade, "upgrade"));

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
    let new_major = ok(Binaries::get()).major;
    let old_major = new_major - 1;
    let upgrade = upgrade_job(&old_major.to_string(), &new_major.to_string());
    let (db, node, tmp) = snapshotted(&scratch, &upgrade);
    let dir = scratch.path().join("db");
    let data = db.data_dir().to_owned();
    drop(db);
    // Only one major is installed: the data directory claims an older one. upgrade.sh never starts
    // a server on it (this one could not start), it only moves it aside.
    fs::write(data.join("PG_VERSION"), format!("{old_major}\n")).unwrap();
    fs::write(data.join("OLD_DATA_MARKER"), "").unwrap();
    let aside = PathBuf::from(format!("{}-{old_major}", data.display()));
    let before = names(&dir);

    // Without its dump (a Job whose init container never ran), nothing is touched.
    let undumped = upgrade_job(&old_major.to_string(), &format!("{new_major}.1"));
    let output = node.run(&undumped, "upgrade");
    let stderr = failed("upgrade.sh without a dump", &output);
    assert!(
        stderr.contains(&format!(
            "{} not found",
            node.backups().join(dump_file(&undumped)).display()
        )),
        "{stderr}"
    );
    assert_eq!(
        names(&dir),
        before,
        "upgrade.sh without a dump changed the layout"
    );

    let stdout = succeeded("upgrade.sh across majors", &node.run(&upgrade, "upgrade"));
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
    expected.push(aside.file_name().unwrap().to_string_lossy().into_owned());
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
    let ready = PathBuf::from(format!("{}-{new_major}.ready", data.display()));
    fs::rename(&data, &ready).unwrap();
    let output = node.run(&upgrade, "upgrade");
    let stdout = succeeded("upgrade.sh after an interrupted swap", &output);
    assert!(stdout.contains("finishing it"), "{stdout}");
    assert!(!ready.exists());
    ok(upgraded.start());
    assert_eq!(ok(upgraded.psql(DATABASE, ROWS)), EXPECTED);
}

/// Point-in-time recovery, the scripts' part. The backup Job of an archiving SampleDB writes a
/// base backup beside its dump; a row committed after it reaches only the archived log, another
/// after the target time. The recovery Job, on an empty data volume, replays to that time: the
/// database holds exactly the rows committed before it, and logs in with the new SampleDB's
/// password, not the source's. The archive is a directory here (PostgreSQL's own `cp` example as
/// both commands); the real node's test goes through the bucket.
#[test]
fn a_base_backup_and_the_archived_log_recover_the_rows_committed_before_a_time() {
    let scratch = ok(Scratch::new("pitr"));
    let archive = ok(scratch.dir("archive"));
    let staging = ok(scratch.dir("staging"));
    let mut source = seeded(&scratch, "source");
    let archive_command = format!("cp %p {}/%f", text(&archive));
    ok(source.psql("postgres", "ALTER SYSTEM SET archive_mode = on"));
    ok(source.psql(
        "postgres",
        &format!("ALTER SYSTEM SET archive_command = '{archive_command}'"),
    ));
    ok(source.stop());
    ok(source.start());

    let bucket = serde_json::json!({ "path": "backups/db", "awsSecret": "keys" });
    let mut archiving = sample_db();
    archiving.spec.backup.s3 = Some(serde_json::from_value(bucket.clone()).unwrap());
    archiving.spec.backup.archive_wal = true;
    let tick = "2025-01-01T00:00:00Z".parse().unwrap();
    let helper = Some("app-operator:test");
    let backup = children::backup_job(&archiving, &owner(&archiving), "17", tick, None, helper);
    let node = Node::new(&scratch, &source).volume("staging", &staging);
    succeeded("backup.sh", &node.run(&backup, "backup"));
    assert_eq!(
        names(&staging),
        ["base.tar.gz"],
        "the base backup, nothing else"
    );

    ok(source.psql(
        DATABASE,
        "INSERT INTO items VALUES (4, 'after the base backup')",
    ));
    let target = ok(source.psql(
        "postgres",
        r#"SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"#,
    ));
    ok(source.psql(DATABASE, "INSERT INTO items VALUES (5, 'after the target')"));
    let segment = ok(source.psql("postgres", "SELECT pg_walfile_name(pg_switch_wal())"));
    // Waits (60 s at most) for the server's archive_command to copy the switched segment.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !archive.join(&segment).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{segment} not archived within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ok(source.stop());

    let mut recovered = sample_db();
    recovered.spec.restore = Some(
        serde_json::from_value(serde_json::json!({
            "pointInTime": { "s3": bucket, "targetTime": target },
        }))
        .unwrap(),
    );
    let recovery = children::first_job(&recovered, &owner(&recovered), helper);
    let data = ok(scratch.dir("recovered"));
    let mut node = node.volume("data", &data);
    let password = "the new database's own";
    node.secrets.insert(
        (SECRET.to_owned(), "password".to_owned()),
        password.to_owned(),
    );
    let restore = container(&recovery, "restore");
    let mut env = node.env(restore);
    env.insert(
        "RESTORE_COMMAND".to_owned(),
        format!("cp {}/%f %p", text(&archive)),
    );
    let output = ok(run_script(script_of(restore), env));
    let said = succeeded("recover.sh", &output);
    assert!(said.contains("recovery stopping before commit"), "{said}");

    let mut server = ok(PostgresServer::existing(&data, USER, password));
    ok(server.start());
    assert_eq!(
        ok(server.psql(DATABASE, "SELECT id FROM items ORDER BY id")),
        "1\n2\n3\n4",
        "the rows committed at or before {target}, none after"
    );
    ok(server.stop());
}
