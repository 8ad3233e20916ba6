"""The compose demo for real, on this host, without a registry: `make compose-demo`.

Builds (and keeps) the images from Debian's packages (bridge/lab/images.py: a base made
with mmdebstrap from this host's apt sources; MariaDB with the official image's start-up
contract, docker/local/; the bridge on that base, docker/Dockerfile; Prometheus from
Debian), brings up docker-compose.yml with docker-compose.local.yml through podman's
Docker-compatible API, lets the workload write, then stops it and checks the replica row
by row against the primary: `verified`. ``check`` also asks Prometheus whether both
bridges are scraped and the alert rules loaded, and evaluates every query of the Grafana dashboard (Grafana itself has
no Debian package: registry users run it). ``down`` removes every container, network and
volume the demo made.

    python docker/compose_demo.py up|check|down

Ports on 127.0.0.1: Prometheus 9090, the primary 13306, the replica 13307; another with
PROMETHEUS_PORT, PRIMARY_PORT, REPLICA_PORT.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from bridge.errors import BridgeError  # noqa: E402
from bridge.lab.images import Podman, base_image, ensure_base, ensure_image  # noqa: E402

PROJECT = "rdma-bridge-demo"
PORTS = {"PROMETHEUS_PORT": 9090, "PRIMARY_PORT": 13306, "REPLICA_PORT": 13307}
LOCAL = {"mariadb": "localhost/rdma-bridge-compose-mariadb:10.11", "bridge": "localhost/rdma-bridge:dev",
         "prometheus": "localhost/rdma-bridge-compose-prometheus:latest"}
WRITTEN = 1000  # transactions the workload writes before the check
BRIDGE_UID = 10001  # the image's user (docker/Dockerfile's BRIDGE_UID): the secret file is given to it
TIMEOUT_S = 300


def say(message: str) -> None:
    print(f"compose-demo: {message}", flush=True)


def ports() -> dict[str, int]:
    return {name: int(os.environ.get(name, default)) for name, default in PORTS.items()}


def check_ports_free() -> None:
    for name, port in ports().items():
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                raise BridgeError(f"127.0.0.1:{port} is taken (another program, or a demo still up: `make "
                                  f"compose-down`); choose another with {name}=PORT make compose-demo") from None


def build_images(podman: Podman) -> None:
    """Each image this demo runs, built from Debian's packages where this host lacks it
    (the bridge's always: the code may have changed; podman's layer cache keeps it quick)."""
    base = ensure_base("bookworm", podman)
    mariadb = ensure_image("mariadb-10.11", podman)
    say("images: MariaDB and Prometheus from Debian's packages, the bridge on the same Debian base")
    if not podman.has_image(LOCAL["mariadb"]):
        podman("build", "--network", "host", "--build-arg", f"BASE={mariadb}", "-f",
               str(HERE / "local" / "Containerfile.mariadb"), "-t", LOCAL["mariadb"], str(HERE / "local"),
               timeout=900)
    if not podman.has_image(LOCAL["prometheus"]):
        podman("build", "--network", "host", "--build-arg", f"BASE={base}", "-f",
               str(HERE / "local" / "Containerfile.prometheus"), "-t", LOCAL["prometheus"], str(HERE / "local"),
               timeout=900)
    fill_wheelhouse()
    podman("build", "--network", "host", "--build-arg", f"BASE={base_image('bookworm')}", "--build-arg",
           f"BRIDGE_UID={BRIDGE_UID}", "--build-arg",
           "PIP_OPTIONS=--no-index --find-links docker/wheelhouse", "-f", str(HERE / "Dockerfile"), "-t",
           LOCAL["bridge"], str(ROOT), timeout=900)


def fill_wheelhouse() -> None:
    """The bridge's dependencies and build requirements as wheels in docker/wheelhouse,
    fetched by this host's pip (its index and certificates): pip in a container may
    reach no index, or not trust this host's."""
    import configparser
    import tomllib

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    wanted = [line.split("#")[0].strip() for line in cfg["options"]["install_requires"].splitlines()]
    wanted += tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(HERE / "wheelhouse"),
                           *[w for w in wanted if w]], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise BridgeError(f"pip wheel (the image's dependencies): {done.stderr.strip()[-600:]}")


@contextlib.contextmanager
def podman_api(podman: Podman):
    """podman's Docker-compatible API on a socket of its own, for docker-compose: the
    runtime, cgroup manager and container ulimits this host needs (bridge.lab.images)."""
    with tempfile.TemporaryDirectory(prefix="rdma-bridge-compose-") as tmp:
        conf = Path(tmp) / "containers.conf"
        conf.write_text(podman.containers_conf())
        sock = Path(tmp) / "podman.sock"
        env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        service = subprocess.Popen([podman.binary, *podman.global_args, "system", "service", "--time=0",
                                    f"unix://{sock}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while not sock.exists():
                if service.poll() is not None or time.monotonic() > deadline:
                    raise BridgeError(f"podman system service did not start: {service.stderr.read().decode()[-400:]}")
                time.sleep(0.1)
            yield {**env, "DOCKER_HOST": f"unix://{sock}", "COMPOSE_PROJECT_NAME": PROJECT,
                   **{name: str(port) for name, port in ports().items()}}
        finally:
            service.terminate()
            service.wait(timeout=30)


def compose(env: dict, *args: str, timeout: float = TIMEOUT_S, podman: Podman | None = None) -> str:
    """docker-compose with both files; ``podman``: run the services' healthchecks while it
    waits (podman schedules them with systemd timers, and a host without systemd never runs
    them: `depends_on: service_healthy` would wait for ever)."""
    proc = subprocess.Popen(["docker-compose", "-f", str(HERE / "docker-compose.yml"),
                             "-f", str(HERE / "docker-compose.local.yml"), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and podman is not None and time.monotonic() < deadline:
        names = podman("ps", "--filter", f"label=com.docker.compose.project={PROJECT}", "--format", "{{.Names}}",
                       check=False).stdout.decode().split()
        for name in names:
            podman("healthcheck", "run", name, check=False)
        time.sleep(1)
    try:
        out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise BridgeError(f"docker-compose {args[0]}: not done in {timeout:.0f}s: {(err or out).strip()[-800:]}")
    if proc.returncode != 0:
        raise BridgeError(f"docker-compose {args[0]}: {(err or out).strip()[-800:]}")
    return out


def server_url(port_name: str):
    from bridge.config import MysqlUrl

    password = os.environ.get("ROOT_PASSWORD", "change-me-root")
    return MysqlUrl.parse(f"mysql://root:{urllib.parse.quote(password)}@127.0.0.1:{ports()[port_name]}")


def wait_connect(url, timeout_s: float = 60.0):
    """A connection once the published port answers (compose returned once the server
    was healthy: only the port's forwarding may lag)."""
    import pymysql

    from bridge.lab.workload import connect

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return connect(url)
        except pymysql.OperationalError as exc:
            if exc.args[0] != 2003 or time.monotonic() > deadline:  # refused: not forwarded yet; else say why
                raise BridgeError(f"connect to {url}: {exc.args[-1]}") from None
            time.sleep(1)


def verify(env: dict) -> bool:
    """The workload writes WRITTEN transactions; then it stops, the replica catches up,
    and both servers are compared row by row (as `make demo` does)."""
    from bridge.check.compare import compare_databases
    from bridge.check.positions import primary_position, wait_for_replica

    primary_url, replica_url = server_url("PRIMARY_PORT"), server_url("REPLICA_PORT")
    primary, replica = wait_connect(primary_url), wait_connect(replica_url)
    try:
        start = sum(g.seq for g in primary_position(primary).mariadb)
        deadline = time.monotonic() + TIMEOUT_S
        while sum(g.seq for g in primary_position(primary).mariadb) < start + WRITTEN:
            if time.monotonic() > deadline:
                raise BridgeError(f"the workload wrote fewer than {WRITTEN} transactions in {TIMEOUT_S}s; "
                                  f"`docker-compose -p {PROJECT} logs workload` says why")
            time.sleep(0.5)
        compose(env, "stop", "-t", "2", "workload")
        target = primary_position(primary)
        say(f"the workload stopped at {target}; waiting for the replica")
        wait_for_replica(replica, replica_url, "default", target, TIMEOUT_S)
        result = compare_databases(primary_url, replica_url, ["demo"])
    finally:
        primary.close()
        replica.close()
    if result.ok and result.digests:
        say(f"verified: both databases hold the same rows ({len(result.digests)} tables of schema demo)")
        return True
    say("MISMATCH: " + "; ".join(f"{d.table}: {d.missing} missing, {d.extra} extra" for d in result.diffs))
    return False


def prometheus(path: str, **query) -> dict:
    url = f"http://127.0.0.1:{ports()['PROMETHEUS_PORT']}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def check_prometheus() -> bool:
    """Both bridges scraped and up; every query of the dashboard evaluates without an error."""
    deadline = time.monotonic() + 60
    while True:
        try:
            targets = prometheus("/api/v1/targets")["data"]["activeTargets"]
            health = {t["labels"]["instance"]: t["health"] for t in targets}
        except OSError:
            health = {}
        if health and all(h == "up" for h in health.values()) and len(health) == 2:
            break
        if time.monotonic() > deadline:
            say(f"Prometheus targets not all up: {health}")
            return False
        time.sleep(1)
    say(f"Prometheus scrapes both bridges: {', '.join(sorted(health))}")
    board = json.loads((HERE / "grafana" / "dashboards" / "rdma-bridge.json").read_text())
    failed = []
    for panel in board["panels"]:
        for target in panel["targets"]:
            answer = prometheus("/api/v1/query", query=target["expr"])
            if answer.get("status") != "success":
                failed.append(f"{panel['title']}: {target['expr']}: {answer.get('error')}")
    if failed:
        say("dashboard queries that fail: " + "; ".join(failed))
        return False
    say(f"every dashboard query evaluates ({sum(len(p['targets']) for p in board['panels'])} queries)")
    groups = prometheus("/api/v1/rules")["data"]["groups"]
    loaded = sum(len(g["rules"]) for g in groups if g["name"] == "rdma-bridge")
    defined = (HERE / "alerts.yml").read_text().count("- alert:")
    if loaded != defined:
        say(f"Prometheus loaded {loaded} of the {defined} alert rules of alerts.yml")
        return False
    say(f"Prometheus loaded the {loaded} alert rules")
    return True


IMAGE_PROBE = ("id -u; for tool in cc gcc cpp; do command -v $tool; done; test ! -e /opt/rdma-bridge/src; "
               "rdma-bridge --version")


def check_bridge_image(podman: Podman) -> bool:
    """The bridge's image runs as its own user, holds no compiler and no source tree, and
    its wheel brought every compiled part that needs no RDMA device to load."""
    done = podman("run", "--rm", *podman.run_args, "--entrypoint", "sh", LOCAL["bridge"], "-c", IMAGE_PROBE,
                  check=False)
    lines = done.stdout.decode().splitlines()
    problems = []
    if done.returncode != 0 or not lines:
        problems.append(f"the probe failed: {done.stderr.decode().strip()[-300:]}")
    elif lines[0] != str(BRIDGE_UID):
        problems.append(f"it runs as uid {lines[0]}, not {BRIDGE_UID}")
    compilers = [line for line in lines if line.startswith("/")]
    if compilers:
        problems.append("it holds a compiler: " + ", ".join(compilers))
    compiled = next((line for line in lines if line.startswith("compiled: ")), "")
    if "hot path" not in compiled or "apply lane" not in compiled:
        problems.append(f"its wheel lacks compiled parts ({compiled or 'no --version answer'})")
    if problems:
        say("the bridge image: " + "; ".join(problems))
        return False
    say(f"the bridge image runs as uid {BRIDGE_UID}, holds no compiler, and says: {compiled}")
    return True


def up(check: bool = False) -> bool:
    check_ports_free()
    podman = Podman.here()
    secret = HERE / "bridge_secret.txt"
    if not secret.exists():
        secret.write_text(secrets.token_hex(32) + "\n")
    secret.chmod(0o400)  # mounted as it is here: readable by the image's user only
    os.chown(secret, BRIDGE_UID, BRIDGE_UID)
    build_images(podman)
    with podman_api(podman) as env:
        say("starting the primary, the replica, both bridges (tcp, with the secret), the workload and Prometheus")
        compose(env, "up", "-d", "--no-build", podman=podman)
        try:
            ok = verify(env)
        except BridgeError:
            say_bridge_logs(podman)
            raise
        if not ok:
            say_bridge_logs(podman)
        if check:
            ok = check_prometheus() and ok
            ok = check_bridge_image(podman) and ok
    say(f"Prometheus on http://127.0.0.1:{ports()['PROMETHEUS_PORT']}; `make compose-down` removes everything")
    return ok


def say_bridge_logs(podman: Podman) -> None:
    """Each bridge container's last lines, for a demo that failed: a bridge that exited
    says why there, and nowhere else."""
    for service in ("bridge-replica", "bridge-primary"):
        names = podman("ps", "-a", "--filter", f"label=com.docker.compose.project={PROJECT}", "--filter",
                       f"label=com.docker.compose.service={service}", "--format", "{{.Names}} {{.Status}}",
                       check=False).stdout.decode().strip()
        for line in names.splitlines():
            name = line.split()[0]
            logs = podman("logs", "--tail", "15", name, check=False)
            say(f"{line}, its last lines:\n" + (logs.stdout + logs.stderr).decode(errors="replace").rstrip())


def down() -> None:
    podman = Podman.here()
    with podman_api(podman) as env:
        compose(env, "down", "-t", "2", "-v", "--remove-orphans")
    say("every container, network and volume of the demo removed")


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "up"
    try:
        if what == "down":
            down()
            return
        if what not in ("up", "check"):
            raise BridgeError(f"{what}: up, check or down")
        sys.exit(0 if up(check=what == "check") else 1)
    except BridgeError as exc:
        print(f"compose-demo: error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
