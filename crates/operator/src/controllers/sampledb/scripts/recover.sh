# SampleDB point-in-time recovery Job, before the database first starts: unpacks the base backup
# BASE_BACKUP into PGDATA (emptied first: the database never ran on this volume), replays the
# archived write-ahead log (RESTORE_COMMAND) on a temporary server up to TARGET_TIME, where it
# promotes; then stops it and gives PGUSER the password PGPASSWORD (the base backup holds the
# roles of the database it was taken from).
#
# Env: PGDATA PGUSER PGPASSWORD BASE_BACKUP (a .tar.gz of pg_basebackup) RESTORE_COMMAND
# (PostgreSQL's restore_command) TARGET_TIME (a timestamp PostgreSQL reads).
SCRIPT=recover.sh

require_env PGDATA PGUSER PGPASSWORD BASE_BACKUP RESTORE_COMMAND TARGET_TIME
require_not_root
[[ -f "$BASE_BACKUP" ]] || fail "base backup $BASE_BACKUP not found"

# quoted VALUE: a string in postgresql.conf and in SQL alike. sql_name VALUE: an SQL identifier.
quoted() { printf "'%s'" "${1//\'/\'\'}"; }
sql_name() { printf '"%s"' "${1//\"/\"\"}"; }

if [[ -e "$PGDATA" ]]; then
    echo "recover.sh: emptying $PGDATA, left by an earlier attempt"
    find "$PGDATA" -mindepth 1 -delete
fi
mkdir -p "$PGDATA"
chmod 700 "$PGDATA"
echo "recover.sh: unpacking $BASE_BACKUP into $PGDATA"
tar -xzf "$BASE_BACKUP" -C "$PGDATA" || fail "could not unpack the base backup $BASE_BACKUP"

# The recovery settings are added for this run only: the file is put back afterwards.
work=$(mktemp -d)
cp "$PGDATA/postgresql.auto.conf" "$work/postgresql.auto.conf"
{
    echo "restore_command = $(quoted "$RESTORE_COMMAND")"
    echo "recovery_target_time = $(quoted "$TARGET_TIME")"
    echo "recovery_target_action = 'promote'"
} >>"$PGDATA/postgresql.auto.conf"
touch "$PGDATA/recovery.signal"

log="$work/postgres.log"
echo "recover.sh: recovering to $TARGET_TIME (the archive's write-ahead log replayed by a temporary server)"
# Started once it accepts connections: when the replay has made the data consistent.
pg_ctl start --wait --timeout 600 --pgdata "$PGDATA" --silent --log "$log" \
    --options "-c listen_addresses='' -k '$work' -c archive_mode=off" ||
    fail "the temporary server did not start: $(grep -m1 -E 'FATAL|PANIC' "$log" || echo 'see its log')"
# Done when the server has promoted: it removes recovery.signal, then records "in production".
promoted() {
    [[ ! -e "$PGDATA/recovery.signal" ]] &&
        [[ "$(pg_controldata "$PGDATA" | sed -n 's/^Database cluster state: *//p')" == "in production" ]]
}
until promoted; do
    if ! pg_ctl status --pgdata "$PGDATA" >/dev/null; then
        sed 's/^/  postgres: /' "$log" >&2
        fail "recovery to $TARGET_TIME failed: $(grep -m1 -E 'FATAL|PANIC' "$log" || echo 'the server stopped (its log is above)')"
    fi
    sleep 1
done
grep -E 'recovery stopping|last completed transaction|selected new timeline' "$log" | sed 's/^/recover.sh: postgres: /' || true
pg_ctl stop --pgdata "$PGDATA" --mode fast --wait --timeout 300 --silent ||
    fail "the temporary server did not stop"
cp "$work/postgresql.auto.conf" "$PGDATA/postgresql.auto.conf"

# Single-user mode needs no role to log in as: it sets the superuser this SampleDB's Secret names.
echo "recover.sh: setting the password of $PGUSER"
role=$(sql_name "$PGUSER")
password=$(quoted "$PGPASSWORD")
statement="DO \$\$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = $(quoted "$PGUSER")) THEN ALTER ROLE $role WITH SUPERUSER LOGIN PASSWORD $password; ELSE CREATE ROLE $role WITH SUPERUSER LOGIN PASSWORD $password; END IF; END \$\$;"
printf '%s\n' "$statement" | postgres --single -D "$PGDATA" -c archive_mode=off postgres >/dev/null 2>"$work/single.log" ||
    fail "could not set the password of $PGUSER: $(grep -m1 -E 'ERROR|FATAL' "$work/single.log" || echo 'single-user mode failed')"
if grep -q -E 'ERROR|FATAL' "$work/single.log"; then
    fail "could not set the password of $PGUSER: $(grep -m1 -E 'ERROR|FATAL' "$work/single.log")"
fi
rm -rf "$work"
echo "recover.sh: done: $PGDATA holds the database as it was at $TARGET_TIME"
