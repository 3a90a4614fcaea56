#!/usr/bin/env bash
# What every SampleDB Job script shares; scripts.rs puts it in front of each one, which sets
# SCRIPT (its name, for messages) before calling anything here.
set -euo pipefail

# fail MESSAGE: says why on stderr and ends the script. The first failure is also the container's
# termination message (the Job's status, then the SampleDB's condition, show it), whatever a
# cleanup trap prints after it.
fail() {
    fail_status 1 "$@"
}

# fail_status STATUS MESSAGE: fail, ending with STATUS.
fail_status() {
    local status=$1
    shift
    echo "$SCRIPT: $*" >&2
    if [[ -w /dev/termination-log && ! -s /dev/termination-log ]]; then
        echo "$SCRIPT: $*" >/dev/termination-log
    fi
    exit "$status"
}

# require_env NAME...: every variable is set and not empty.
require_env() {
    local name
    for name in "$@"; do
        [[ -n "${!name:-}" ]] || fail "environment variable $name is not set"
    done
}

# BACKUP_FILE names a file inside BACKUP_DIR, not a path.
require_file_name() {
    [[ "$BACKUP_FILE" != */* ]] || fail "BACKUP_FILE=$BACKUP_FILE must be a file name inside BACKUP_DIR, not a path"
}

require_backup_dir() {
    [[ -d "$BACKUP_DIR" ]] || fail "BACKUP_DIR=$BACKUP_DIR is not a directory (is the backups volume mounted?)"
}

require_not_root() {
    [[ "$(id -u)" != 0 ]] ||
        fail "must not run as root (PostgreSQL refuses to): run the container as the postgres user (runAsUser 999 in the official image)"
}

# The exit status of a failure worth another try in a new Pod (EX_TEMPFAIL): the Job's
# podFailurePolicy ignores it (children.rs), so its Pods keep trying until the Job's deadline.
TRY_AGAIN=75

# Waits up to 60 s for the server at PGHOST:PGPORT to accept connections, else ends with
# TRY_AGAIN: the server was Ready when the Job was made, but a starved node can start the Pod
# minutes later, when the server may be restarting.
wait_for_server() {
    echo "$SCRIPT: waiting up to 60 s for PostgreSQL at $PGHOST:$PGPORT to accept connections"
    local deadline=$((SECONDS + 60))
    until pg_isready --quiet; do
        ((SECONDS < deadline)) || fail_status "$TRY_AGAIN" \
            "PostgreSQL at $PGHOST:$PGPORT did not accept connections within 60 s; a new Pod tries again until the Job's deadline"
        sleep 1
    done
}

# start_private_server DATA SOCKETS [HINT]: a temporary server on DATA that listens on no TCP
# address, its only socket in SOCKETS (a directory nobody else knows of); PGHOST and PGPORT then
# point at it. HINT is added to the message when it does not start.
start_private_server() {
    local data=$1 sockets=$2 hint=${3:-}
    export PGHOST="$sockets" PGPORT=5432
    echo "$SCRIPT: starting a temporary PostgreSQL $(<"$data/PG_VERSION") server on $data (no TCP address, socket in $sockets)"
    if ! pg_ctl start --pgdata "$data" --wait --timeout 600 --silent --log "$sockets/postgres.log" \
        --options "-c listen_addresses='' -k '$sockets' -p $PGPORT"; then
        sed 's/^/  postgres: /' "$sockets/postgres.log" >&2 || true
        fail "the temporary server on $data did not start (its log is above${hint:+; $hint})"
    fi
}

# stop_private_server DATA: a fast shutdown, waited for.
stop_private_server() {
    echo "$SCRIPT: stopping the temporary server"
    pg_ctl stop --pgdata "$1" --mode fast --wait --timeout 300 --silent
}

# dump_to PARTIAL TARGET WHAT: dumps PGDATABASE (custom format) to PARTIAL and, once it reads back
# as an archive, renames it to TARGET; WHAT (backup, snapshot) names it in messages. A failed dump
# leaves nothing under TARGET.
dump_to() {
    local partial=$1 target=$2 what=$3
    echo "$SCRIPT: dumping database $PGDATABASE to $partial"
    noting_error pg_dump -w --format=custom --dbname "$PGDATABASE" --file "$partial" ||
        fail "pg_dump of database $PGDATABASE failed: $FIRST_ERROR; no $what was written"
    # pg_dump (15) can exit 0 having written nothing to a full volume: the free space says so.
    if ! noting_error pg_restore --list "$partial" >/dev/null; then
        local free
        free=$(df -Pk "$(dirname "$partial")" | awk 'NR == 2 { print $4 }')
        fail "the dump $partial is not a readable archive ($FIRST_ERROR; ${free:-?} KiB free on its volume); no $what was written"
    fi
    chmod 0640 "$partial"
    mv -f "$partial" "$target"
    echo "$SCRIPT: done: wrote $target ($(wc -c <"$target") bytes)"
}

# noting_error COMMAND...: runs COMMAND (its stderr passed on); when it fails, FIRST_ERROR is its
# first line that says "error" (else its exit status). A failure's message quotes it: it is what
# the SampleDB's condition shows, where "the error above" cannot be read.
noting_error() {
    local errors status=0
    errors=$(mktemp)
    "$@" 2>"$errors" || status=$?
    cat "$errors" >&2
    FIRST_ERROR=$(grep -m1 -i 'error' "$errors" || echo "exit status $status")
    rm -f "$errors"
    return "$status"
}

# restore_into SOURCE [CONSEQUENCE]: restores the dump SOURCE into PGDATABASE (created empty
# beforehand).
restore_into() {
    echo "$SCRIPT: restoring $1 into database $PGDATABASE"
    noting_error pg_restore -w --exit-on-error --no-owner --dbname "$PGDATABASE" "$1" ||
        fail "pg_restore of $1 into database $PGDATABASE failed: $FIRST_ERROR${2:+; $2}"
}

# SCRIPT's own part follows.
