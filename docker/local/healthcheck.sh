#!/bin/bash
# The official mariadb image's healthcheck.sh, as far as the compose demo asks it
# (--connect --innodb_initialized): past the first start's set-up, and answering.
[ -e /run/mysqld/ready ] && mariadb-admin --socket=/run/mysqld/mysqld.sock ping >/dev/null 2>&1
