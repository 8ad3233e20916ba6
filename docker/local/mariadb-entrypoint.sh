#!/bin/bash
# The official mariadb image's start-up contract, on Debian's mariadb-server (the images
# `make compose-demo` builds here, from Debian's packages): on the first start, a fresh
# datadir, root's password from MARIADB_ROOT_PASSWORD (for local and network clients),
# then every /docker-entrypoint-initdb.d/*.sh; arguments starting with "-" go to mariadbd.
# healthcheck.sh (beside this file) answers once the server is up for the network.
set -euo pipefail
datadir=/var/lib/mysql
mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
rm -f /run/mysqld/ready
marker="$datadir/.initialized-by-entrypoint"  # Debian's package made a datadir already: not ours yet
if [ ! -e "$marker" ]; then
  if [ ! -d "$datadir/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$datadir" --skip-test-db >/dev/null
  fi
  mariadbd --user=mysql --datadir="$datadir" --skip-networking --socket=/run/mysqld/mysqld.sock &
  pid=$!
  for _ in $(seq 1 120); do
    mariadb-admin --socket=/run/mysqld/mysqld.sock ping >/dev/null 2>&1 && break
    sleep 0.5
  done
  mariadb --socket=/run/mysqld/mysqld.sock -uroot <<SQL
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('${MARIADB_ROOT_PASSWORD}')
  OR unix_socket;
CREATE USER 'root'@'%' IDENTIFIED BY '${MARIADB_ROOT_PASSWORD}';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
SQL
  for script in /docker-entrypoint-initdb.d/*.sh; do
    [ -e "$script" ] && bash "$script"
  done
  mariadb-admin --socket=/run/mysqld/mysqld.sock -uroot -p"${MARIADB_ROOT_PASSWORD}" shutdown
  wait "$pid" || true
  touch "$marker"
fi
touch /run/mysqld/ready
if [ "${1:-}" = "" ] || [ "${1:0:1}" = "-" ]; then
  exec mariadbd --user=mysql --datadir="$datadir" --bind-address=0.0.0.0 --socket=/run/mysqld/mysqld.sock "$@"
fi
exec "$@"
