"""The Kubernetes manifests for real, on this host, without a cluster or a registry:
`make kube-demo` renders the tcp overlay (deploy/kubernetes) and runs it with `podman kube
play`, on the images the compose demo builds from Debian's packages. A workload writes on
the primary, and the replica is checked row by row: `verified`. `make kube-down` removes
everything it made.

What podman 4.3 plays differs from a cluster, and the rendered manifests are adapted for
it here only (the files under deploy/kubernetes stay as a cluster takes them):
- it plays Deployments, ConfigMaps, Secrets and claims; Services, the NetworkPolicy, the
  PodMonitor and the PrometheusRule are left out (a pod is reached by its name on the
  demo's network: the primary side is pointed at `rdma-bridge-replica-pod-0`);
- it cannot read a Secret into an environment variable: the passwords go in as values;
- a secret volume's files hold the values still base64-encoded, 0644 and root's (no
  defaultMode, no fsGroup): the sidecar decodes them into a private directory first (the
  bridge refuses a key others can read);
- the servers' port is published on 127.0.0.1 for the workload and the check.

    python deploy/kubernetes/kube_demo.py up|down

Ports on 127.0.0.1: the primary 13316, the replica 13317 (KUBE_PRIMARY_PORT, KUBE_REPLICA_PORT).
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docker"))
import compose_demo  # noqa: E402  (docker/compose_demo.py: the images)

from bridge.check.compare import compare_databases  # noqa: E402
from bridge.config import MysqlUrl  # noqa: E402
from bridge.errors import BridgeError  # noqa: E402
from bridge.lab.images import Podman  # noqa: E402
from bridge.lab.workload import MixedWorkload, connect, create_schema  # noqa: E402
from bridge.ops.certs import make_set  # noqa: E402

STATE = ROOT / ".kube-demo"  # the rendered manifest, the passwords and the certificates (git ignores it)
NETWORK = "rdma-bridge-kube"
PLAYED = {"ConfigMap", "Secret", "PersistentVolumeClaim", "Deployment"}
PORTS = {"primary": int(os.environ.get("KUBE_PRIMARY_PORT", 13316)),
         "replica": int(os.environ.get("KUBE_REPLICA_PORT", 13317))}
SCHEMA, WRITTEN, TIMEOUT_S = "kube_demo", 1000, 300


def say(message: str) -> None:
    print(f"kube-demo: {message}", flush=True)


def rendered() -> list[dict]:
    done = subprocess.run(["kubectl", "kustomize", str(HERE / "overlays" / "tcp")], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise BridgeError(f"kubectl kustomize: {done.stderr.strip()[-400:]}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def passwords() -> dict[str, str]:
    path = STATE / "passwords.yaml"
    if not path.exists():
        STATE.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump({k: secrets.token_hex(12) for k in ("ROOT_PASSWORD", "REPL_PASSWORD",
                                                                           "APPLY_PASSWORD", "BRIDGE_SECRET")}))
        path.chmod(0o600)
    return yaml.safe_load(path.read_text())


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def for_podman(docs: list[dict], pw: dict[str, str]) -> list[dict]:
    """The rendered manifests as podman 4.3 plays them (see the module's text)."""
    certs = make_set(STATE / "tls", ["rdma-bridge-replica-pod-0", "rdma-bridge-primary-pod-0", "localhost"])
    out = []
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind not in PLAYED:
            continue
        if kind == "Secret" and name.startswith("rdma-bridge-secrets"):
            doc["data"] = {k: _b64(v) for k, v in pw.items() if k != "BRIDGE_SECRET"}
        elif kind == "Secret" and name.startswith("rdma-bridge-control"):
            doc["data"] = {"secret": _b64(pw["BRIDGE_SECRET"] + "\n")}
        elif kind == "ConfigMap" and name.startswith("rdma-bridge-channel"):
            doc["data"]["PRIMARY_ARGS"] = doc["data"]["PRIMARY_ARGS"].replace("rdma-bridge-replica:",
                                                                              "rdma-bridge-replica-pod-0:")
        elif kind == "Deployment":
            _pod_for_podman(doc["spec"]["template"]["spec"], doc["metadata"]["labels"]["app.kubernetes.io/component"],
                            pw)
        out.append(doc)
    out.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "rdma-bridge-tls"},
                "data": {"tls.pem": _b64(Path(certs.cert).read_bytes()),
                         "tls-key.pem": _b64(Path(certs.key).read_bytes()),
                         "ca.pem": _b64(Path(certs.ca).read_bytes())}})
    return out


def _pod_for_podman(spec: dict, role: str, pw: dict[str, str]) -> None:
    for container in spec["containers"]:
        container["image"] = compose_demo.LOCAL["mariadb" if container["name"] == "mariadb" else "bridge"]
        for env in container.get("env", []):
            ref = env.pop("valueFrom", {}).get("secretKeyRef")
            if ref is not None:
                env["value"] = pw[ref["key"]]
        if container["name"] == "mariadb":
            container["ports"][0].update(hostPort=PORTS[role], hostIP="127.0.0.1")
        else:  # its secret files made private to the bridge's user, as fsGroup and defaultMode make them in a cluster
            command = container["command"][-1].replace("/etc/rdma-bridge/tls/", "/tmp/files/").replace(
                "/etc/rdma-bridge/secret/secret", "/tmp/files/secret")
            container["command"][-1] = (
                "mkdir -p /tmp/files && umask 077 && for f in /etc/rdma-bridge/tls/* /etc/rdma-bridge/secret/secret; "
                'do base64 -d "$f" > "/tmp/files/${f##*/}" || exit 1; done && ' + command)
    for volume in spec["volumes"]:
        if "secret" in volume:
            volume["secret"]["defaultMode"] = 0o444  # no fsGroup here: readable to the bridge's user


def run(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    podman = Podman.here()
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as conf:
        conf.write(podman.containers_conf())
        conf.flush()
        done = subprocess.run([podman.binary, *podman.global_args, *args], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "CONTAINERS_CONF": conf.name})
    if check and done.returncode != 0:
        raise BridgeError(f"podman {args[0]} {args[1] if len(args) > 1 else ''}: {done.stderr.strip()[-600:]}")
    return done


def url(role: str, pw: dict[str, str]) -> MysqlUrl:
    return MysqlUrl.parse(f"mysql://root:{pw['ROOT_PASSWORD']}@127.0.0.1:{PORTS[role]}?ssl-mode=DISABLED")


def wait_server(role: str, pw: dict[str, str]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            connect(url(role, pw)).close()
            return
        except Exception as exc:  # noqa: BLE001 - the server starting (its first start runs the grants)
            if time.monotonic() > deadline:
                raise BridgeError(f"the {role} server on 127.0.0.1:{PORTS[role]} did not answer within "
                                  f"{TIMEOUT_S}s: {exc}") from None
            time.sleep(1)


def ready(role: str) -> str:
    """The sidecar's own readiness probe, asked inside its pod."""
    port = 9401 if role == "primary" else 9402
    probe = (f"import urllib.request,urllib.error\ntry: print(urllib.request.urlopen('http://127.0.0.1:{port}/ready',"
             "timeout=2).read().decode().strip())\nexcept urllib.error.HTTPError as e: print(e.read().decode().strip())")
    done = run("exec", f"rdma-bridge-{role}-pod-0-rdma-bridge", "python3", "-c", probe, check=False, timeout=30)
    return done.stdout.strip() or done.stderr.strip()[-200:]


def up() -> None:
    podman = Podman.here()
    compose_demo.build_images(podman)
    pw = passwords()
    manifest = STATE / "kube.yaml"
    manifest.write_text(yaml.safe_dump_all(for_podman(rendered(), pw), sort_keys=False))
    say(f"rendered deploy/kubernetes/overlays/tcp for podman: {manifest.relative_to(ROOT)}")
    if run("network", "exists", NETWORK, check=False).returncode != 0:
        run("network", "create", NETWORK)
    run("kube", "play", "--network", NETWORK, str(manifest), timeout=600)
    say("pods: rdma-bridge-primary-pod-0 (MariaDB + the primary side), rdma-bridge-replica-pod-0 (MariaDB + "
        "the replica side)")
    for role in PORTS:
        wait_server(role, pw)
    deadline = time.monotonic() + TIMEOUT_S
    while ready("replica") != "ok" or ready("primary") != "ok":
        if time.monotonic() > deadline:
            raise BridgeError(f"the sidecars are not ready: primary {ready('primary')!r}, replica {ready('replica')!r}"
                              f"; their logs: podman logs rdma-bridge-replica-pod-0-rdma-bridge")
        time.sleep(2)
    say("both sidecars ready (/ready: in session and applying)")
    primary = connect(url("primary", pw))
    create_schema(primary, SCHEMA)
    MixedWorkload(primary, SCHEMA, seed=31).run(WRITTEN)
    say(f"workload: {WRITTEN} transactions into {SCHEMA} on the primary")
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            result = compare_databases(url("primary", pw), url("replica", pw), [SCHEMA])
        except BridgeError as exc:  # the schema not on the replica yet
            result, why = None, str(exc)
        if result is not None and result.ok:
            break
        if time.monotonic() > deadline:
            raise BridgeError(f"the replica did not match the primary within {TIMEOUT_S}s: "
                              f"{why if result is None else [(d.table, d.missing, d.extra) for d in result.diffs]}")
        time.sleep(1)
    for name, (a, b) in result.digests.items():
        say(f"  ok   {name:28} rows {a.rows:>6} / {b.rows:<6} sha256 {a.sha256[:12]} / {b.sha256[:12]}")
    print("verified: both databases hold the same rows", flush=True)
    say("it keeps running; `make kube-down` removes it")


def down() -> None:
    manifest = STATE / "kube.yaml"
    if manifest.exists():
        run("kube", "down", str(manifest), check=False)
        for doc in yaml.safe_load_all(manifest.read_text()):
            if doc and doc["kind"] == "PersistentVolumeClaim":
                run("volume", "rm", "--force", doc["metadata"]["name"], check=False)
            elif doc and doc["kind"] == "Secret":
                run("secret", "rm", doc["metadata"]["name"], check=False)
    if run("network", "exists", NETWORK, check=False).returncode == 0:
        run("network", "rm", NETWORK, check=False)
    say("removed the pods, their volumes and secrets, and the network")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command not in ("up", "down"):
        sys.exit(__doc__)
    try:
        up() if command == "up" else down()
    except BridgeError as exc:
        print(f"kube-demo: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
