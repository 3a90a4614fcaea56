//! The shell scripts SampleDB's Jobs run, each as `["bash", "-c", SCRIPT]` in a container of the
//! official `postgres` image (which has bash and the PostgreSQL client and server binaries on
//! PATH).
//!
//! The environment they read (each script checks its own and names what is missing):
//! - `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`: the connection (libpq's own
//!   variables); [`INIT`], [`BACKUP`] and [`RESTORE`] talk to the running server over TCP,
//!   [`SNAPSHOT`] and [`UPGRADE`] read only `PGUSER`, `PGPASSWORD` and `PGDATABASE` and connect to
//!   a temporary server of their own over a private Unix socket.
//! - `PGDATA`: the data directory on the mounted data volume, for [`SNAPSHOT`] and [`UPGRADE`],
//!   which run while the database's own server is stopped, as the postgres user (never root). For
//!   [`UPGRADE`] it must be a subdirectory of the volume, not its mount point.
//! - `BACKUP_DIR`: where the backups volume is mounted.
//! - `BACKUP_FILE`: a file name (not a path) inside `BACKUP_DIR`: written by [`BACKUP`] and
//!   [`SNAPSHOT`], read by [`RESTORE`] and [`UPGRADE`].
//! - `INIT_SQL_DIR`: [`INIT`] only, optional: a directory (a ConfigMap volume) of `*.sql` files.
//!
//! Each constant is `scripts/common.sh` (the checks, the temporary socket-only server, writing a
//! dump under a temporary name, restoring one) followed by the script's own part.
//!
//! Dumps are `pg_dump --format=custom` of `PGDATABASE`, written under a temporary name and renamed
//! when complete.

/// A script with the shared prelude (`common.sh`) in front of it.
macro_rules! with_prelude {
    ($script:literal) => {
        concat!(
            include_str!("scripts/common.sh"),
            include_str!(concat!("scripts/", $script))
        )
    };
}

/// The exit status of a script that may succeed in a new Pod (`TRY_AGAIN` in `common.sh`, which a
/// test holds equal): the server did not accept connections in time.
pub const TRY_AGAIN: i32 = 75;

/// The init Job: waits up to 60 s for the server (else [`TRY_AGAIN`]), checks that it can connect, then runs the
/// `*.sql` files of `INIT_SQL_DIR` (if set and present) in name order, all in one transaction
/// with `ON_ERROR_STOP` (a failure applies none of them). Reads `PGHOST`, `PGPORT`, `PGUSER`,
/// `PGPASSWORD`, `PGDATABASE` and, optionally, `INIT_SQL_DIR`.
pub const INIT: &str = with_prelude!("init.sh");

/// A backup Job: dumps `PGDATABASE` of the running server to `BACKUP_DIR/BACKUP_FILE`; a failed
/// dump leaves no file of that name. With `BASE_BACKUP` (a path), then a base backup of the
/// whole server to it (`pg_basebackup`, tar, gzip, its write-ahead log left to the archive). Reads `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
/// `PGDATABASE`, `BACKUP_DIR` and `BACKUP_FILE`.
pub const BACKUP: &str = with_prelude!("backup.sh");

/// The restore Job: fails at once, naming the file, if `BACKUP_DIR/BACKUP_FILE` is missing; waits
/// up to 60 s for the server (else [`TRY_AGAIN`]); drops `PGDATABASE`, creates it empty and restores the dump into it
/// (`pg_restore --exit-on-error --no-owner`). Reads `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
/// `PGDATABASE`, `BACKUP_DIR` and `BACKUP_FILE`.
pub const RESTORE: &str = with_prelude!("restore.sh");

/// The offline snapshot (before a delete, and the upgrade Job's init container with the old
/// image): starts a temporary server on `PGDATA` that listens on no TCP address, dumps
/// `PGDATABASE` to `BACKUP_DIR/BACKUP_FILE` and stops the server, also on failure. Reads `PGDATA`,
/// `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `BACKUP_DIR` and `BACKUP_FILE`.
pub const SNAPSHOT: &str = with_prelude!("snapshot.sh");

/// The upgrade Job's main container (new image), after [`SNAPSHOT`]: exits at once if
/// `PGDATA/PG_VERSION` is already the major version of the image's `postgres` (a minor upgrade);
/// otherwise restores the dump `BACKUP_DIR/BACKUP_FILE` into a new data directory (superuser
/// `PGUSER`/`PGPASSWORD`, the old access rules), moves `PGDATA` aside to `PGDATA-<old major>` and
/// the new directory into its place. Reads `PGDATA`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`,
/// `BACKUP_DIR` and `BACKUP_FILE`.
pub const UPGRADE: &str = with_prelude!("upgrade.sh");

/// The point-in-time recovery Job, before the database first starts: unpacks the base backup
/// `BASE_BACKUP` into `PGDATA` (emptied first), replays the archived write-ahead log through
/// `RESTORE_COMMAND` on a temporary server up to `TARGET_TIME`, where it promotes and is
/// stopped; then gives `PGUSER` the password `PGPASSWORD` in single-user mode. Reads `PGDATA`,
/// `PGUSER`, `PGPASSWORD`, `BASE_BACKUP`, `RESTORE_COMMAND` and `TARGET_TIME`.
pub const RECOVER: &str = with_prelude!("recover.sh");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_try_again_with_the_status_the_jobs_ignore() {
        let line = format!("\nTRY_AGAIN={TRY_AGAIN}\n");
        for script in [INIT, BACKUP, RESTORE, SNAPSHOT, UPGRADE, RECOVER] {
            assert!(script.contains(&line), "no {line:?} in the prelude");
        }
    }
}
