#!/usr/bin/env bash
# Bring up a local Docker Engine for the integration tests and build the test image.
#
# Idempotent: installs docker.io, busybox-static, iproute2 and iptables only when missing,
# starts dockerd only when `docker info` does not answer, builds gobrave-test-busybox:latest
# only when absent.
# Never pulls from a registry: the image is built FROM scratch around the static busybox.
#
# Environment:
#   DOCKERD_LOG   where dockerd logs (default /var/log/dockerd.log)
#   ENGINE_WAIT   seconds to wait for each dockerd attempt (default 60)
#   DAEMON_JSON   dockerd's configuration file (default /etc/docker/daemon.json)
#
# The hardening tests run a container with the OCI runtime "runsc" (gVisor's name). No gVisor
# package is installable here, so unless the engine already knows "runsc", the name is mapped
# to runc in daemon.json's "runtimes": written before dockerd starts, or applied to a running
# engine with SIGHUP (a live configuration reload; the engine is never restarted).
set -euo pipefail

IMAGE="gobrave-test-busybox:latest"
RUNTIME_ALIAS="runsc"
DAEMON_JSON="${DAEMON_JSON:-/etc/docker/daemon.json}"
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
ENGINE_WAIT="${ENGINE_WAIT:-60}"
export DEBIAN_FRONTEND=noninteractive

say() { printf '[test-engine] %s\n' "$*"; }
die() { printf '[test-engine] ERROR: %s\n' "$*" >&2; exit 1; }

# --- 1. packages -----------------------------------------------------------------------------
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
# The engine-cut test (a private dockerd in a network namespace) needs ip and iptables.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "need root to install: ${missing[*]}"
    say "installing ${missing[*]}"
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
        say "apt-get update"
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
            || die "apt-get install ${missing[*]} failed"
    fi
else
    say "packages present (docker.io, busybox-static)"
fi
command -v docker >/dev/null 2>&1 || die "no docker CLI on PATH after installing docker.io"

# --- 2. engine -------------------------------------------------------------------------------
engine_up() { docker info >/dev/null 2>&1; }
engine_knows_alias() {
    docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q "\"$RUNTIME_ALIAS\""
}

# Add {"runtimes": {"runsc": {"path": <runc>}}} to daemon.json unless the name is there.
# Prints "added" or "present"; keeps every other key of the file as it was.
map_runtime_alias() {
    python3 - "$DAEMON_JSON" "$RUNTIME_ALIAS" "$(command -v runc || echo runc)" <<'JSON'
import json, os, sys
path, name, runc = sys.argv[1:]
data = {}
if os.path.exists(path):
    with open(path) as handle:
        text = handle.read().strip()
    data = json.loads(text) if text else {}
runtimes = data.setdefault("runtimes", {})
if name in runtimes:
    print("present")
    sys.exit(0)
runtimes[name] = {"path": runc}
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as handle:
    json.dump(data, handle, indent=2)
    handle.write("\n")
os.replace(path + ".tmp", path)
print("added")
JSON
}

# Start dockerd with the given extra flags; succeed once `docker info` answers.
try_dockerd() {
    say "starting dockerd${*:+ $*} (log: $DOCKERD_LOG)"
    nohup dockerd "$@" >>"$DOCKERD_LOG" 2>&1 </dev/null &
    local pid=$! waited=0
    while [ "$waited" -lt "$ENGINE_WAIT" ]; do
        if engine_up; then
            say "dockerd is up (pid $pid, after ${waited}s)"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            say "dockerd${*:+ $*} exited early; see $DOCKERD_LOG"
            return 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    say "dockerd${*:+ $*} did not answer within ${ENGINE_WAIT}s; stopping it"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
}

if engine_up; then
    say "engine already answering"
    if engine_knows_alias; then
        say "OCI runtime $RUNTIME_ALIAS known to the engine"
    else
        [ "$(id -u)" -eq 0 ] || die "engine lacks runtime $RUNTIME_ALIAS; need root to map it"
        say "mapping OCI runtime $RUNTIME_ALIAS to runc in $DAEMON_JSON ($(map_runtime_alias))"
        pidfile=/var/run/docker.pid
        [ -s "$pidfile" ] || die "no $pidfile: cannot ask dockerd to reload its configuration"
        kill -HUP "$(cat "$pidfile")"
        for _ in $(seq 1 50); do engine_knows_alias && break; sleep 0.2; done
        engine_knows_alias \
            || die "dockerd did not load runtime $RUNTIME_ALIAS after SIGHUP (see $DOCKERD_LOG)"
        say "dockerd reloaded its configuration (SIGHUP): runtime $RUNTIME_ALIAS known"
    fi
else
    [ "$(id -u)" -eq 0 ] || die "engine not running and not root: cannot start dockerd"
    say "mapping OCI runtime $RUNTIME_ALIAS in $DAEMON_JSON ($(map_runtime_alias))"
    # Plain defaults work on this sandbox (overlay2, bridge + iptables); the fallbacks cover
    # kernels without overlayfs or without netfilter.
    try_dockerd \
        || try_dockerd --storage-driver=vfs \
        || try_dockerd --storage-driver=vfs --iptables=false --bridge=none \
        || die "could not start the Docker Engine; last lines of $DOCKERD_LOG:
$(tail -n 15 "$DOCKERD_LOG" 2>/dev/null)"
fi
server="$(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"
say "server $server, $(docker info --format 'storage {{.Driver}}, cgroup v{{.CgroupVersion}}')"

# --- 3. test image ---------------------------------------------------------------------------
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "image $IMAGE present"
else
    busybox_bin="$(dpkg -L busybox-static | grep -E '/bin/busybox$' | head -1)"
    [ -x "$busybox_bin" ] || die "static busybox not found (busybox-static installed?)"
    ctx="$(mktemp -d)"
    trap 'rm -rf "$ctx"' EXIT
    cp "$busybox_bin" "$ctx/busybox"
    cat >"$ctx/Dockerfile" <<'EOF'
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "mkdir", "-p", "/tmp", "/usr/bin", "/sbin", "/usr/sbin"]
RUN ["/bin/busybox", "chmod", "1777", "/tmp"]
RUN ["/bin/busybox", "--install", "-s"]
CMD ["sh"]
EOF
    say "building $IMAGE from scratch + $busybox_bin"
    DOCKER_BUILDKIT=0 docker build --pull=false -q -t "$IMAGE" "$ctx" >/dev/null 2>"$ctx/err" \
        || die "docker build failed: $(cat "$ctx/err")"
fi

# --- 4. smoke checks -------------------------------------------------------------------------
out="$(docker run --rm "$IMAGE" sh -c 'echo ok' 2>&1)" || die "container run failed: $out"
[ "$out" = "ok" ] || die "container run printed '$out', expected 'ok'"
say "container run: ok"

# Docker 20.10 on cgroup v1 misses the OOM notice for a few percent of containers that die
# at once, so give it three tries before calling memory limits unenforced.
oom=unknown
for attempt in 1 2 3; do
    oom_name="gobrave-test-engine-oom-$$-$attempt"
    docker run --name "$oom_name" --memory 6m --memory-swap 6m "$IMAGE" \
        sh -c 'x=$(head -c 50000000 /dev/zero | tr "\0" a); echo survived' >/dev/null 2>&1 || true
    oom="$(docker inspect --format '{{.State.OOMKilled}}' "$oom_name" 2>/dev/null || echo unknown)"
    docker rm -f "$oom_name" >/dev/null 2>&1 || true
    [ "$oom" = "true" ] && break
done
if [ "$oom" = "true" ]; then
    say "memory limits: enforced (6m container was OOMKilled)"
else
    say "WARNING: memory limits not enforced here (OOMKilled=$oom); OOM tests will fail or skip"
fi
say "ready"
