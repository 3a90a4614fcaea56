# SampleDB init Job: runs the *.sql files of INIT_SQL_DIR against PGDATABASE on the running server,
# in name order and all in one transaction (a failure applies none of them, so a retried Job starts
# clean; statements that cannot run in a transaction block, such as CREATE DATABASE, are not
# allowed). Without INIT_SQL_DIR, or with no *.sql files in it, it only checks the connection.
#
# Env: PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE (the server, over TCP); INIT_SQL_DIR (optional).
SCRIPT=init.sh

require_env PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE
wait_for_server

echo "init.sh: connecting to database $PGDATABASE as $PGUSER"
version=$(psql -X -w -At -v ON_ERROR_STOP=1 -c 'SHOW server_version') ||
    fail "cannot connect to database $PGDATABASE at $PGHOST:$PGPORT as $PGUSER (see the error above)"
echo "init.sh: connected (PostgreSQL $version)"

files=()
if [[ -z "${INIT_SQL_DIR:-}" ]]; then
    echo "init.sh: INIT_SQL_DIR is not set: no init SQL to run"
elif [[ ! -d "$INIT_SQL_DIR" ]]; then
    echo "init.sh: INIT_SQL_DIR=$INIT_SQL_DIR does not exist: no init SQL to run"
else
    # Name order in the C locale, the same everywhere. A ConfigMap volume's files are symlinks into
    # a hidden ..data directory: -L follows them, -maxdepth 1 leaves that directory out.
    listing=$(find -L "$INIT_SQL_DIR" -mindepth 1 -maxdepth 1 -type f -name '*.sql' | LC_ALL=C sort)
    if [[ -n "$listing" ]]; then
        mapfile -t files <<<"$listing"
    else
        echo "init.sh: no *.sql files in INIT_SQL_DIR=$INIT_SQL_DIR: no init SQL to run"
    fi
fi
((${#files[@]} > 0)) || exit 0

args=()
for file in "${files[@]}"; do
    echo "init.sh: will run $file"
    args+=(--file "$file")
done
echo "init.sh: running ${#files[@]} SQL file(s) in one transaction in database $PGDATABASE"
psql -X -w -q -v ON_ERROR_STOP=1 --single-transaction "${args[@]}" ||
    fail "the init SQL failed (the error above names the file and line); none of it was applied"
echo "init.sh: done: ran ${#files[@]} SQL file(s)"
