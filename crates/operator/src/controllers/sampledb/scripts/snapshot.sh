#!/usr/bin/env bash
# SampleDB snapshot (offline dump): with the database's server stopped, starts a temporary server on
# the data directory PGDATA that listens on no TCP address (only on a Unix socket in a private
# temporary directory), dumps PGDATABASE (pg_dump --format=custom) to BACKUP_DIR/BACKUP_FILE and
# stops the server again, also when anything fails. Runs before a delete and, with the old image,
# as the first step of an upgrade. The dump is written under a temporary name and renamed when
# complete and readable. Must run as the data directory's owner (the postgres user), never as root.
#
# Env: PGDATA (the data directory, on the mounted data volume); PGUSER PGPASSWORD PGDATABASE (who
# dumps what); BACKUP_DIR (the backups volume); BACKUP_FILE (a file name inside BACKUP_DIR).
set -euo pipefail

fail() {
    echo "snapshot.sh: $*" >&2
    exit 1
}

for name in PGDATA PGUSER PGPASSWORD PGDATABASE BACKUP_DIR BACKUP_FILE; do
    [[ -n "${!name:-}" ]] || fail "environment variable $name is not set"
done
[[ "$(id -u)" != 0 ]] ||
    fail "must not run as root (PostgreSQL refuses to): run the container as the postgres user (runAsUser 999 in the official image)"
if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    for converted in "$PGDATA"-*.ready; do
        [[ -d "$converted" ]] &&
            fail "$PGDATA/PG_VERSION not found, but $converted is the converted data of an interrupted upgrade: rerun upgrade.sh to move it into place"
    done
    fail "$PGDATA/PG_VERSION not found: PGDATA=$PGDATA is not a PostgreSQL data directory"
fi
[[ "$BACKUP_FILE" != */* ]] || fail "BACKUP_FILE=$BACKUP_FILE must be a file name inside BACKUP_DIR, not a path"
[[ -d "$BACKUP_DIR" ]] || fail "BACKUP_DIR=$BACKUP_DIR is not a directory (is the backups volume mounted?)"

target="$BACKUP_DIR/$BACKUP_FILE"
partial=$(mktemp "$BACKUP_DIR/.$BACKUP_FILE.partial.XXXXXX")
sockets=$(mktemp -d)
started=
cleanup() {
    local status=$?
    # Only a server this script started: a pid file left by another one may name any process here.
    if [[ -n "$started" ]]; then
        echo "snapshot.sh: stopping the temporary server"
        pg_ctl stop --pgdata "$PGDATA" --mode fast --wait --timeout 300 --silent || status=1
    fi
    rm -rf "$sockets"
    rm -f "$partial"
    exit "$status"
}
trap cleanup EXIT

# Only ours: no TCP address, and a socket nobody else knows of.
export PGHOST="$sockets" PGPORT=5432
echo "snapshot.sh: starting a temporary PostgreSQL $(<"$PGDATA/PG_VERSION") server on $PGDATA (no TCP address, socket in $sockets)"
if ! pg_ctl start --pgdata "$PGDATA" --wait --timeout 600 --silent --log "$sockets/postgres.log" \
    --options "-c listen_addresses='' -k '$sockets' -p $PGPORT"; then
    sed 's/^/  postgres: /' "$sockets/postgres.log" >&2 || true
    fail "the temporary server on $PGDATA did not start (its log is above; is the database's own server still running?)"
fi
started=1

echo "snapshot.sh: dumping database $PGDATABASE to $partial"
pg_dump -w --format=custom --dbname "$PGDATABASE" --file "$partial" ||
    fail "pg_dump of database $PGDATABASE failed (see the error above); no snapshot was written"
pg_restore --list "$partial" >/dev/null || fail "the dump $partial is not a readable archive; no snapshot was written"
chmod 0640 "$partial"
mv -f "$partial" "$target"
echo "snapshot.sh: done: wrote $target ($(wc -c <"$target") bytes)"
