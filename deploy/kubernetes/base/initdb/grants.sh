#!/bin/bash
# Runs once in each MariaDB/MySQL container's first start (docker-entrypoint-initdb.d):
# the project's least-privilege grants from sql/, for connections from the compose
# network ('%' instead of the sandbox's '127.0.0.1'). GRANTS_FILE, GRANT_USER and
# GRANT_PASSWORD come from the service's environment.
set -euo pipefail
client=$(command -v mariadb || command -v mysql)
sed -e "s/{user}/${GRANT_USER}/g" -e "s/{password}/${GRANT_PASSWORD}/g" -e "s/'127.0.0.1'/'%'/g" \
    "/sql/${GRANTS_FILE}" | "$client" -uroot -p"${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}"
