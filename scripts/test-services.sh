#!/usr/bin/env bash
# Make sure every service the test suite talks to answers: PostgreSQL, Redis, the Docker
# Engine (with its FROM-scratch test image), promtool, docker-registry and headless Chromium.
# Idempotent; used by `make test` and therefore by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '[test-services] %s\n' "$*"; }

# PostgreSQL (127.0.0.1:5432, trust auth, user postgres, database test).
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    say "starting PostgreSQL"
    if ! command -v pg_ctlcluster >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null
    fi
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432 -q || { say "PostgreSQL does not answer"; exit 1; }
psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" \
    | grep -q 1 || psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test"
say "PostgreSQL answers"

# Redis (127.0.0.1:6379), for the Redis-broker tests.
if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
    say "starting Redis"
    command -v redis-server >/dev/null 2>&1 || {
        apt-get update -q >/dev/null && apt-get install -y -q redis-server >/dev/null; }
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
    sleep 1
fi
say "Redis answers"

# promtool (Debian's prometheus package), for the /metrics and alert-rule checks.
if ! command -v promtool >/dev/null 2>&1; then
    say "installing promtool"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends prometheus >/dev/null
fi
say "promtool $(promtool --version 2>&1 | head -n 1 | awk '{print $3}')"

# docker-registry (Debian's), for the registry-pull tests: each test module serves its own
# on a free 127.0.0.1 port. Installed only; its system service is never enabled or started.
if ! command -v docker-registry >/dev/null 2>&1; then
    say "installing docker-registry"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends docker-registry >/dev/null
    # The package enables (and, under systemd, starts) its unit: undone at once.
    if [ -d /run/systemd/system ]; then
        systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
    else
        rm -f /etc/systemd/system/multi-user.target.wants/docker-registry.service
    fi
fi
say "docker-registry $(docker-registry --version 2>&1 | awk '{print $NF}')"

# openssh-server (Debian's), for the ssh:// engine tests: each test module runs its own sshd
# on a free 127.0.0.1 port. Installed only; its system service is never enabled or started.
if [ ! -x /usr/sbin/sshd ]; then
    say "installing openssh-server"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends openssh-server >/dev/null
    if [ -d /run/systemd/system ]; then
        systemctl disable --now ssh.service >/dev/null 2>&1 || true
    else
        rm -f /etc/systemd/system/multi-user.target.wants/ssh.service \
            /etc/systemd/system/sshd.service
    fi
fi
say "sshd $(/usr/sbin/sshd -V 2>&1 | head -n 1 | awk '{print $1}')"

bash scripts/test-engine.sh
if [ -f scripts/browser-setup.sh ]; then
    bash scripts/browser-setup.sh
fi
