# SampleDB restore Job: replaces PGDATABASE on the running server with the contents of the dump
# BACKUP_DIR/BACKUP_FILE: drops the database (if it exists), creates it empty (from template0) and
# runs pg_restore --exit-on-error --no-owner into it. A retried Job starts over the same way.
#
# Env: PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE (the server, over TCP; PGUSER must be allowed to
# drop and create the database); BACKUP_DIR (the backups volume); BACKUP_FILE (a file name inside
# BACKUP_DIR).
SCRIPT=restore.sh

require_env PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE BACKUP_DIR BACKUP_FILE
require_file_name

source="$BACKUP_DIR/$BACKUP_FILE"
[[ -f "$source" ]] || fail "backup file $source not found (BACKUP_DIR=$BACKUP_DIR, BACKUP_FILE=$BACKUP_FILE)"
pg_restore --list "$source" >/dev/null ||
    fail "backup file $source is not a pg_dump archive in the custom format (see the error above)"

wait_for_server

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

restore_into "$source"
echo "restore.sh: done: database $PGDATABASE holds the contents of $source"
