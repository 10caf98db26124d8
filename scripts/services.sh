#!/usr/bin/env bash
# Make the servers the integration tests use run on this machine, from Debian's packages:
# PostgreSQL on 127.0.0.1:5432 (trust auth on loopback, database `test`) and MariaDB on
# 127.0.0.1:3306 (root without a password over TCP, database `test`). Installs what is absent
# (one `apt-get update` first), starts what is stopped, creates what is missing; idempotent.
# scripts/test.sh calls it. KAFKA_DIRECT_PG_DSN / KAFKA_DIRECT_MYSQL_HOST pointing elsewhere
# make the tests use those servers instead, and this script leaves them alone.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

say() { echo "[services] $*"; }
updated=0
apt_install() {
    if [ "$updated" -eq 0 ]; then
        say "apt-get update"
        $SUDO apt-get update -qq
        updated=1
    fi
    say "apt-get install $*"
    $SUDO apt-get install -y -qq "$@" > /dev/null
}

wait_for() {  # wait_for SECONDS COMMAND...: retry until the command succeeds
    local limit=$1; shift
    for _ in $(seq "$limit"); do
        if "$@" > /dev/null 2>&1; then return 0; fi
        sleep 1
    done
    "$@"
}

setup_postgres() {
    if ! command -v pg_ctlcluster > /dev/null; then apt_install postgresql; fi
    local version
    version="$(ls /etc/postgresql | sort -V | tail -1)"
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    # Trust on loopback: a fresh Debian cluster asks for a password over TCP.
    if ! $SUDO grep -q "127.0.0.1/32 trust" "$hba"; then
        $SUDO sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
        $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main reload 2> /dev/null || true
    fi
    if ! pg_isready -q -h 127.0.0.1 -p 5432; then
        say "starting PostgreSQL $version"
        $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start
    fi
    wait_for 30 pg_isready -q -h 127.0.0.1 -p 5432
    if ! psql -h 127.0.0.1 -U postgres -d test -c "select 1" > /dev/null 2>&1; then
        say "creating PostgreSQL database test"
        psql -h 127.0.0.1 -U postgres -d postgres -c "CREATE DATABASE test" > /dev/null
    fi
    say "PostgreSQL ready: postgresql://postgres@127.0.0.1:5432/test"
}

setup_mariadb() {
    if [ ! -x /usr/sbin/mariadbd ]; then apt_install mariadb-server; fi
    if ! [ -S /run/mysqld/mysqld.sock ] || ! $SUDO mariadb -uroot -e "select 1" > /dev/null 2>&1; then
        say "starting MariaDB"
        $SUDO mkdir -p /run/mysqld
        $SUDO chown mysql:mysql /run/mysqld
        $SUDO start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- \
            --user=mysql --bind-address=127.0.0.1 --port=3306
        wait_for 60 $SUDO mariadb -uroot -e "select 1"
    fi
    # Root over TCP without a password: a fresh Debian server lets root in only by its socket
    # (and names 127.0.0.1 'localhost' unless it skips name resolution).
    $SUDO mariadb -uroot -e "ALTER USER 'root'@'localhost'
            IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
        CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
        GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
        CREATE DATABASE IF NOT EXISTS test; FLUSH PRIVILEGES;"
    wait_for 30 mariadb -h 127.0.0.1 -P 3306 -uroot -e "select 1" test
    say "MariaDB ready: root@127.0.0.1:3306/test"
}

pg_host="$(python3 -c 'import os,urllib.parse as u;print(u.urlparse(os.environ.get("KAFKA_DIRECT_PG_DSN","postgresql://x@127.0.0.1/test")).hostname or "")')"
case "$pg_host" in 127.0.0.1|localhost|::1|"") setup_postgres ;; *) say "PostgreSQL at $pg_host: not managed here" ;; esac
case "${KAFKA_DIRECT_MYSQL_HOST:-127.0.0.1}" in
    127.0.0.1|localhost|::1) setup_mariadb ;;
    *) say "MySQL at $KAFKA_DIRECT_MYSQL_HOST: not managed here" ;;
esac
# socat: the mutual-TLS front of the test Schema Registry (SchemaRegistry(client_auth=True);
# Apicurio's build cannot require client certificates itself).
if ! command -v socat > /dev/null; then apt_install socat; fi
