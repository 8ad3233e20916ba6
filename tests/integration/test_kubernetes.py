"""The Kubernetes manifests (deploy/kubernetes): the generated parts current, every
rendered overlay valid against a current Kubernetes release's schemas
(kubernetes-validate, strict: no field it does not know), and what the overlays promise
present in what they render. The Prometheus Operator's CRD schemas are not at hand here:
its two resources are checked for what the alerts and the scrape need."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
kubernetes_validate = pytest.importorskip("kubernetes_validate")
pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) is not installed")
KUBERNETES = "1.33.0"  # a current release; kubernetes-validate carries its schemas


def rendered(overlay: str) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(KUBE / "overlays" / overlay)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def sidecar(deployment: dict) -> dict:
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "rdma-bridge")


def test_the_generated_manifests_are_current():
    done = subprocess.run([sys.executable, str(KUBE / "generate.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("overlay", ["tcp", "rdma"])
def test_every_rendered_manifest_is_valid_for_a_current_kubernetes(overlay):
    docs = rendered(overlay)
    core = [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com/")]
    for doc in core:
        try:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}") \
                from None
    assert {d["kind"] for d in core} == {"ConfigMap", "Secret", "Service", "PersistentVolumeClaim", "Deployment",
                                         "NetworkPolicy"}
    channel = next(d["data"] for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].startswith(
        "rdma-bridge-channel"))
    assert channel["TRANSPORT"] == overlay
    for deployment in by_kind(docs, "Deployment"):
        side = sidecar(deployment)
        assert side["readinessProbe"]["httpGet"]["path"] == "/ready" and side["livenessProbe"]["httpGet"]["path"] == \
            "/live"
        assert side["resources"]["requests"]["cpu"] and side["securityContext"]["runAsNonRoot"]
        if overlay == "rdma":
            assert side["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
            assert "IPC_LOCK" in side["securityContext"]["capabilities"]["add"]
            assert side["resources"]["limits"]["hugepages-2Mi"]
    assert "--pin-near-nic" in channel["REPLICA_ARGS"] if overlay == "rdma" else "--pin-near-nic" not in str(channel)


def test_the_control_port_is_open_to_the_primarys_pod_only_and_the_alerts_are_the_tested_ones():
    docs = rendered("tcp")
    policy = by_kind(docs, "NetworkPolicy")[0]["spec"]
    control = [rule for rule in policy["ingress"] if any(p["port"] == "control" for p in rule["ports"])]
    assert len(control) == 1 and control[0]["from"] == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "rdma-bridge", "app.kubernetes.io/component": "primary"}}}]
    rule = by_kind(docs, "PrometheusRule")[0]
    assert rule["spec"]["groups"] == yaml.safe_load((ROOT / "contrib" / "prometheus" / "alerts.yml").read_text())[
        "groups"]
    monitor = by_kind(docs, "PodMonitor")[0]["spec"]
    assert monitor["jobLabel"] == "app.kubernetes.io/name" and monitor["podMetricsEndpoints"][0]["port"] == "metrics"
    labels = {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] for d in by_kind(docs, "Deployment")}
    assert labels == {"rdma-bridge"}  # the job label RdmaBridgeDown's up{job="rdma-bridge"} reads


def test_the_scheduled_checksum_is_a_valid_cronjob():
    """deploy/kubernetes/extras/checksum-cronjob.yaml, applied beside an overlay."""
    doc = yaml.safe_load((KUBE / "extras" / "checksum-cronjob.yaml").read_text())
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    container = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "checksum" and not any("PASSWORD" in str(e.get("value", ""))
                                                          for e in container["env"])
