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

# With BASE_BACKUP (a path on an emptyDir the upload reads), a base backup of the whole server
# follows the dump, for point-in-time recovery: pg_basebackup's tar, gzipped. Its write-ahead
# log is left to the archive: without `--wal-method`, the server answers only once the last
# segment the backup needs is archived.
if [[ -n "${BASE_BACKUP:-}" ]]; then
    base_dir=$(mktemp -d "$(dirname "$BASE_BACKUP")/.base.XXXXXX")
    echo "backup.sh: taking a base backup of the server at $PGHOST:$PGPORT"
    noting_error pg_basebackup -w --pgdata "$base_dir" --format=tar --gzip --wal-method=none \
        --checkpoint=fast --no-manifest ||
        fail "pg_basebackup failed: $FIRST_ERROR; the dump $target was written, no base backup"
    mv -f "$base_dir/base.tar.gz" "$BASE_BACKUP"
    rm -rf "$base_dir"
    echo "backup.sh: done: wrote $BASE_BACKUP ($(wc -c <"$BASE_BACKUP") bytes)"
fi
