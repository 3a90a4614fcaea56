#!/usr/bin/env bash
# SampleDB restore Job: replaces PGDATABASE on the running server with the contents of the dump
# BACKUP_DIR/BACKUP_FILE: drops the database (if it exists), creates it empty (from template0) and
# runs pg_restore --exit-on-error --no-owner into it. A retried Job starts over the same way.
#
# Env: PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE (the server, over TCP; PGUSER must be allowed to
# drop and create the database); BACKUP_DIR (the backups volume); BACKUP_FILE (a file name inside
# BACKUP_DIR).
set -euo pipefail

fail() {
    echo "restore.sh: $*" >&2
    exit 1
}

for name in PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE BACKUP_DIR BACKUP_FILE; do
    [[ -n "${!name:-}" ]] || fail "environment variable $name is not set"
done
[[ "$BACKUP_FILE" != */* ]] || fail "BACKUP_FILE=$BACKUP_FILE must be a file name inside BACKUP_DIR, not a path"

source="$BACKUP_DIR/$BACKUP_FILE"
[[ -f "$source" ]] || fail "backup file $source not found (BACKUP_DIR=$BACKUP_DIR, BACKUP_FILE=$BACKUP_FILE)"
pg_restore --list "$source" >/dev/null ||
    fail "backup file $source is not a pg_dump archive in the custom format (see the error above)"

echo "restore.sh: waiting up to 60 s for PostgreSQL at $PGHOST:$PGPORT to accept connections"
deadline=$((SECONDS + 60))
until pg_isready --quiet; do
    ((SECONDS < deadline)) || fail "PostgreSQL at $PGHOST:$PGPORT did not accept connections within 60 s"
    sleep 1
done

# Dropping and creating a database needs a connection to another one.
maintenance=postgres
if [[ "$PGDATABASE" == postgres ]]; then
    maintenance=template1
fi
echo "restore.sh: replacing database $PGDATABASE with a new, empty one"
dropdb -w --if-exists --force --maintenance-db="$maintenance" "$PGDATABASE" ||
    fail "could not drop database $PGDATABASE (see the error above)"
createdb -w --template=template0 --maintenance-db="$maintenance" "$PGDATABASE" ||
    fail "could not create database $PGDATABASE (see the error above)"

echo "restore.sh: restoring $source into database $PGDATABASE"
pg_restore -w --exit-on-error --no-owner --dbname "$PGDATABASE" "$source" ||
    fail "pg_restore of $source into database $PGDATABASE failed (see the error above)"
echo "restore.sh: done: database $PGDATABASE holds the contents of $source"
