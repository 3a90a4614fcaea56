# SampleDB upgrade Job, main container (new image), after snapshot.sh ran in the init container
# with the old image and dumped the offline data directory to BACKUP_DIR/BACKUP_FILE.
#
# If PGDATA/PG_VERSION is the major version of the `postgres` on PATH, the data needs no conversion
# (a minor upgrade) and nothing is touched. Otherwise it creates a new data directory next to PGDATA
# (initdb, superuser PGUSER with password PGPASSWORD), restores the dump into it on a temporary
# server that listens on no TCP address, copies the old pg_hba.conf and pg_ident.conf over (the
# access rules; postgresql.conf and postgresql.auto.conf are the new major's defaults) and swaps:
# PGDATA is moved aside to PGDATA-<old major> (kept for a rollback) and the new directory into its
# place. The old directory is never started or changed, only moved, so PGDATA must be a
# subdirectory of the volume, not its mount point. Only PGDATABASE is carried over (other
# databases and roles are not in the dump). A retried run starts over or, if it was interrupted
# between the two renames, finishes the swap. Never runs as root.
#
# Env: PGDATA (the data directory, on the mounted data volume); PGUSER PGPASSWORD PGDATABASE (the
# superuser of the new directory, the database to restore); BACKUP_DIR (the backups volume);
# BACKUP_FILE (the dump snapshot.sh wrote, a file name inside BACKUP_DIR).
SCRIPT=upgrade.sh

require_env PGDATA PGUSER PGPASSWORD PGDATABASE BACKUP_DIR BACKUP_FILE
require_not_root
require_file_name

version=$(postgres --version) || fail "no postgres binary on PATH (PATH=$PATH)"
new_major=$(sed -E 's/^[^0-9]*([0-9]+).*/\1/' <<<"$version")
[[ "$new_major" =~ ^[0-9]+$ ]] || fail "cannot read a major version from \`postgres --version\`: $version"

work="$PGDATA-$new_major.partial"
ready="$PGDATA-$new_major.ready"

if [[ ! -e "$PGDATA" && -d "$ready" ]]; then
    echo "upgrade.sh: $PGDATA is missing and $ready holds converted data: an earlier run was interrupted while swapping; finishing it"
    mv "$ready" "$PGDATA"
    sync
    echo "upgrade.sh: done: PGDATA=$PGDATA holds the PostgreSQL $new_major data"
    exit 0
fi

[[ -f "$PGDATA/PG_VERSION" ]] || fail "$PGDATA/PG_VERSION not found: PGDATA=$PGDATA is not a PostgreSQL data directory"
old_major=$(<"$PGDATA/PG_VERSION")
if [[ "$old_major" == "$new_major" ]]; then
    echo "upgrade.sh: $PGDATA holds PostgreSQL $old_major data and the new server is PostgreSQL $new_major ($version)"
    echo "upgrade.sh: no data conversion needed (a minor upgrade): the new server uses the data as it is"
    exit 0
fi

aside="$PGDATA-$old_major"
dump="$BACKUP_DIR/$BACKUP_FILE"
if command -v mountpoint >/dev/null && mountpoint -q "$PGDATA"; then
    fail "PGDATA=$PGDATA is a mount point, which cannot be moved aside: set PGDATA to a subdirectory of the volume"
fi
[[ ! -e "$aside" ]] || fail "$aside already exists (the old data of an earlier upgrade?): move it away first"
[[ -f "$dump" ]] ||
    fail "dump $dump not found (BACKUP_DIR=$BACKUP_DIR, BACKUP_FILE=$BACKUP_FILE; snapshot.sh writes it)"
pg_restore --list "$dump" >/dev/null ||
    fail "dump $dump is not a pg_dump archive in the custom format (see the error above)"
echo "upgrade.sh: converting $PGDATA from PostgreSQL $old_major to $new_major through the dump $dump"

rm -rf "$work" "$ready"
scratch=$(mktemp -d)
started=
cleanup() {
    local status=$?
    if [[ -n "$started" ]]; then
        stop_private_server "$work" || status=1
    fi
    if ((status != 0)); then
        rm -rf "$work"
    fi
    rm -rf "$scratch"
    exit "$status"
}
trap cleanup EXIT

echo "upgrade.sh: creating the PostgreSQL $new_major data directory $work (superuser $PGUSER)"
printf '%s\n' "$PGPASSWORD" >"$scratch/pwfile"
initdb --pgdata "$work" --username "$PGUSER" --pwfile "$scratch/pwfile" ||
    fail "initdb of $work failed (see the error above)"
rm -f "$scratch/pwfile"

start_private_server "$work" "$scratch"
started=1
if [[ "$PGDATABASE" != postgres ]]; then
    createdb -w --template=template0 "$PGDATABASE" || fail "could not create database $PGDATABASE (see the error above)"
fi
restore_into "$dump" "$PGDATA is unchanged"
stop_private_server "$work" || fail "the temporary server on $work did not stop"
started=

for conf in pg_hba.conf pg_ident.conf; do
    if [[ -f "$PGDATA/$conf" ]]; then
        echo "upgrade.sh: keeping the access rules of $PGDATA/$conf"
        cp "$PGDATA/$conf" "$work/$conf"
    fi
done
sync
mv "$work" "$ready"

echo "upgrade.sh: moving $PGDATA aside to $aside and $ready into its place"
mv "$PGDATA" "$aside"
mv "$ready" "$PGDATA"
sync
echo "upgrade.sh: done: PGDATA=$PGDATA holds the PostgreSQL $new_major data"
echo "upgrade.sh: the PostgreSQL $old_major data is kept in $aside for a rollback (delete it once the upgrade is confirmed)"
