# SampleDB backup Job: dumps PGDATABASE from the running server (pg_dump --format=custom) to
# BACKUP_DIR/BACKUP_FILE. The dump is written under a temporary name and renamed when complete and
# readable, so a failed dump never leaves a file that looks like a backup.
#
# Env: PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE (the server, over TCP); BACKUP_DIR (the backups
# volume); BACKUP_FILE (a file name inside BACKUP_DIR).
SCRIPT=backup.sh

require_env PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE BACKUP_DIR BACKUP_FILE
require_file_name
require_backup_dir

target="$BACKUP_DIR/$BACKUP_FILE"
partial=$(mktemp "$BACKUP_DIR/.$BACKUP_FILE.partial.XXXXXX")
trap 'rm -f "$partial"' EXIT

echo "backup.sh: backing up database $PGDATABASE at $PGHOST:$PGPORT"
dump_to "$partial" "$target" backup
