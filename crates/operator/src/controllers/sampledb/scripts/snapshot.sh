# SampleDB snapshot (offline dump): with the database's server stopped, starts a temporary server on
# the data directory PGDATA that listens on no TCP address (only on a Unix socket in a private
# temporary directory), dumps PGDATABASE (pg_dump --format=custom) to BACKUP_DIR/BACKUP_FILE and
# stops the server again, also when anything fails. Runs before a delete and, with the old image,
# as the first step of an upgrade. The dump is written under a temporary name and renamed when
# complete and readable. Must run as the data directory's owner (the postgres user), never as root.
#
# Env: PGDATA (the data directory, on the mounted data volume); PGUSER PGPASSWORD PGDATABASE (who
# dumps what); BACKUP_DIR (the backups volume); BACKUP_FILE (a file name inside BACKUP_DIR).
SCRIPT=snapshot.sh

require_env PGDATA PGUSER PGPASSWORD PGDATABASE BACKUP_DIR BACKUP_FILE
require_not_root
if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    for converted in "$PGDATA"-*.ready; do
        [[ -d "$converted" ]] &&
            fail "$PGDATA/PG_VERSION not found, but $converted is the converted data of an interrupted upgrade: rerun upgrade.sh to move it into place"
    done
    fail "$PGDATA/PG_VERSION not found: PGDATA=$PGDATA is not a PostgreSQL data directory"
fi
require_file_name
require_backup_dir

target="$BACKUP_DIR/$BACKUP_FILE"
partial=$(mktemp "$BACKUP_DIR/.$BACKUP_FILE.partial.XXXXXX")
sockets=$(mktemp -d)
started=
cleanup() {
    local status=$?
    # Only a server this script started: a pid file left by another one may name any process here.
    if [[ -n "$started" ]]; then
        stop_private_server "$PGDATA" || status=1
    fi
    rm -rf "$sockets"
    rm -f "$partial"
    exit "$status"
}
trap cleanup EXIT

start_private_server "$PGDATA" "$sockets" "is the database's own server still running?"
started=1
dump_to "$partial" "$target" snapshot
