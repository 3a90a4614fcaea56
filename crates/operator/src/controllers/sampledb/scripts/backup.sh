#!/usr/bin/env bash
# SampleDB backup Job: dumps PGDATABASE from the running server (pg_dump --format=custom) to
# BACKUP_DIR/BACKUP_FILE. The dump is written under a temporary name and renamed when complete and
# readable, so a failed dump never leaves a file that looks like a backup.
#
# Env: PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE (the server, over TCP); BACKUP_DIR (the backups
# volume); BACKUP_FILE (a file name inside BACKUP_DIR).
set -euo pipefail

fail() {
    echo "backup.sh: $*" >&2
    exit 1
}

for name in PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE BACKUP_DIR BACKUP_FILE; do
    [[ -n "${!name:-}" ]] || fail "environment variable $name is not set"
done
[[ "$BACKUP_FILE" != */* ]] || fail "BACKUP_FILE=$BACKUP_FILE must be a file name inside BACKUP_DIR, not a path"
[[ -d "$BACKUP_DIR" ]] || fail "BACKUP_DIR=$BACKUP_DIR is not a directory (is the backups volume mounted?)"

target="$BACKUP_DIR/$BACKUP_FILE"
partial=$(mktemp "$BACKUP_DIR/.$BACKUP_FILE.partial.XXXXXX")
trap 'rm -f "$partial"' EXIT

echo "backup.sh: dumping database $PGDATABASE at $PGHOST:$PGPORT to $partial"
pg_dump -w --format=custom --dbname "$PGDATABASE" --file "$partial" ||
    fail "pg_dump of database $PGDATABASE at $PGHOST:$PGPORT failed (see the error above); no backup was written"
pg_restore --list "$partial" >/dev/null || fail "the dump $partial is not a readable archive; no backup was written"
chmod 0640 "$partial"
mv -f "$partial" "$target"
echo "backup.sh: done: wrote $target ($(wc -c <"$target") bytes)"
