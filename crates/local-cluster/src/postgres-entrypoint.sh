#!/usr/bin/env bash
# docker-entrypoint.sh of our postgres images: the official image's contract (POSTGRES_USER,
# POSTGRES_PASSWORD, POSTGRES_DB, PGDATA, POSTGRES_INITDB_ARGS, /docker-entrypoint-initdb.d),
# written for this project.
set -Eeuo pipefail
shopt -s nullglob

# `docker run postgres -c x=y` means postgres with options; any other command runs as given.
if [ "${1:0:1}" = '-' ]; then
	set -- postgres "$@"
fi
if [ "$1" != 'postgres' ]; then
	exec "$@"
fi

export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"

# As root: make the data and socket directories the postgres user's, then become it (postgres
# refuses to run as root).
if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	find "$PGDATA" \! -user postgres -exec chown postgres:postgres '{}' +
	chmod 700 "$PGDATA"
	chown postgres:postgres /var/run/postgresql
	chmod 3777 /var/run/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

# Not root (a Pod's runAsUser): the directory may be new on a volume; initdb wants it 0700.
mkdir -p "$PGDATA"
chmod 700 "$PGDATA" 2>/dev/null || :

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ]; then
		echo 'docker-entrypoint.sh: the database is not initialised and POSTGRES_PASSWORD is not set' >&2
		exit 1
	fi
	# Quoted words in POSTGRES_INITDB_ARGS stay one argument, as in the official image.
	eval "initdb_args=(${POSTGRES_INITDB_ARGS:-})"
	# The password from a file descriptor: never on a command line `ps` shows.
	initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
		--auth-local=trust --auth-host=scram-sha-256 "${initdb_args[@]}"
	# initdb allows only loopback over TCP; other Pods connect with the password.
	printf '\nhost all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"

	# A server on the unix socket only, so nothing connects before initialisation is done.
	unset PGHOST PGHOSTADDR
	pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -p ${PGPORT:-5432}" start
	psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER")
	if [ "$POSTGRES_DB" != 'postgres' ]; then
		"${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
	fi
	for file in /docker-entrypoint-initdb.d/*; do
		case "$file" in
		*.sh)
			echo "docker-entrypoint.sh: running $file"
			if [ -x "$file" ]; then "$file"; else . "$file"; fi
			;;
		*.sql)
			echo "docker-entrypoint.sh: running $file"
			"${psql[@]}" --dbname "$POSTGRES_DB" -f "$file"
			;;
		*) echo "docker-entrypoint.sh: ignoring $file" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	echo 'docker-entrypoint.sh: initialisation done; starting postgres'
fi

shift
exec postgres -c listen_addresses='*' "$@"
