"""The Kubernetes deployment (deploy/kubernetes) checked without a cluster: the manifests parse, the core
kinds validate strictly (unknown fields are errors) against Kubernetes' OpenAPI schemas with
kubernetes-validate, the Helm templates render to the manifests, and probes, ports and arguments are
those a real `atoll serve` answers. KServe's ServingRuntime and the Prometheus Operator's
ServiceMonitor are CRDs outside those schemas: their pod part is validated as a Pod, their own fields
by hand against the Go types of KServe (pkg/apis/serving/v1alpha1/servingruntime_types.go) and
prometheus-operator (pkg/apis/monitoring/v1/servicemonitor_types.go): required fields, names, ports.
Not checked: the CRDs' own OpenAPI schemas, admission by a live API server, scheduling, the image.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from atoll import __version__
from atoll.cli import build_parser
from atoll.config import SERVE_FLAGS, config_from_args
from tests.atoll.probes import request, serving

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
MANIFESTS = ROOT / "manifests"
CHART = ROOT / "helm" / "atoll"
KUBERNETES = "1.37"  # the newest schemas kubernetes-validate 1.37 carries
CRDS = {"serving.kserve.io/v1alpha1", "monitoring.coreos.com/v1"}
# The fields of KServe's ServingRuntimePodSpec that are PodSpec's too (labels and annotations go to
# the pod's metadata); InferenceServiceProtocol's values.
POD_FIELDS = ("containers", "volumes", "nodeSelector", "affinity", "tolerations", "imagePullSecrets", "hostIPC")
PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}
PLACEHOLDER = re.compile(r"\{\{ \.Values\.([\w.]+) \}\}")
SERVING = re.compile(r"serving on (http://\S+) and grpc://\S+ \(metrics (http://\S+)/metrics\)")


def load(path: Path) -> list[dict]:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def manifests() -> list[dict]:
    return [d for p in sorted(MANIFESTS.rglob("*.yaml")) for d in load(p)]


def one(kind: str) -> dict:
    (found,) = [d for d in manifests() if d["kind"] == kind]
    return found


def serve_config(container: dict):
    """The configuration `atoll serve` starts with from this container's command line, parsed by
    Atoll's own parser (argparse exits on a flag it does not know)."""
    assert container["command"] == ["atoll"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "serve"
    return config_from_args(args, SERVE_FLAGS)


def ports(container: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def as_pod(name: str, spec: dict) -> dict:
    """A ServingRuntime's pod part as the Pod KServe makes of it."""
    pod_spec = {k: spec[k] for k in POD_FIELDS if k in spec}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec}


def test_every_file_parses_and_every_manifest_has_a_kind_and_name():
    files = [p for p in ROOT.rglob("*.yaml") if CHART / "templates" not in p.parents]
    assert len(files) >= 9
    for path in files:
        load(path)  # raises on bad YAML
    docs = manifests()
    assert {d["kind"] for d in docs} == {"DaemonSet", "Service", "ServingRuntime", "ServiceMonitor"}
    assert all(d["metadata"]["name"] == "atoll" for d in docs)


def test_core_kinds_validate_strictly_against_the_kubernetes_schemas():
    core = [d for d in manifests() + load(ROOT / "overlays" / "pvc" / "pvc.yaml") if d["apiVersion"] not in CRDS]
    assert {d["kind"] for d in core} == {"DaemonSet", "Service", "PersistentVolumeClaim"}
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_strict_validation_refuses_an_unknown_field():
    daemonset = copy.deepcopy(one("DaemonSet"))
    daemonset["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = []  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES, strict=True)


def test_the_pvc_overlay_patches_the_models_volume_into_a_valid_daemonset():
    overlay = ROOT / "overlays" / "pvc"
    (kustomization,) = load(overlay / "kustomization.yaml")
    assert all((overlay / r).resolve().exists() for r in kustomization["resources"])
    (patch,) = kustomization["patches"]
    daemonset = copy.deepcopy(one("DaemonSet"))
    assert patch["target"]["kind"] == daemonset["kind"] and patch["target"]["name"] == daemonset["metadata"]["name"]
    (op,) = load(overlay / patch["path"])[0]
    assert op["op"] == "replace"
    *parents, last = op["path"].strip("/").split("/")
    node = daemonset
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    assert node[int(last)]["name"] == op["value"]["name"] == "models"
    node[int(last)] = op["value"]
    kubernetes_validate.validate(daemonset, KUBERNETES, strict=True)
    (pvc,) = load(overlay / "pvc.yaml")
    assert op["value"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]


def test_the_helm_templates_render_to_the_plain_manifests():
    """Each `{{ .Values.a.b }}` replaced by values.yaml's a.b, nothing more: the chart's defaults
    are exactly the manifests."""
    (values,) = load(CHART / "values.yaml")

    def value(m: re.Match) -> str:
        node = values
        for key in m.group(1).split("."):
            node = node[key]
        return str(node)

    templates = sorted((CHART / "templates").glob("*.yaml"))
    assert [t.name for t in templates] == ["daemonset.yaml", "service.yaml"]
    for template in templates:
        rendered = PLACEHOLDER.sub(value, template.read_text())
        assert "{{" not in rendered, f"{template.name}: a template construct other than {{{{ .Values.x }}}}"
        assert rendered == (MANIFESTS / template.name).read_text(), template.name
    (chart,) = load(CHART / "Chart.yaml")
    image = one("DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert chart["apiVersion"] == "v2" and chart["appVersion"] == __version__
    assert image == f"{values['image']['repository']}:{__version__}"


def test_the_daemonset_runs_atoll_serve_on_the_ports_its_probes_and_service_use():
    daemonset, service = one("DaemonSet"), one("Service")
    pod = daemonset["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    server = serve_config(container).server
    assert server.host == "0.0.0.0" and server.repository == "/models"
    named = ports(container)
    assert named == {"http": server.http_port, "grpc": server.grpc_port, "metrics": server.metrics_port}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(server.metrics_port)
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/models", "/dev/shm"}
    assert daemonset["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"] == service["spec"]["selector"]
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        name: (port, name) for name, port in named.items()}
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] >= 1
    assert [r for r in limits if r.startswith("amd.com/xilinx_")]


def test_the_serving_runtime_is_what_kserve_asks_for():
    runtime = one("ServingRuntime")
    spec = runtime["spec"]
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    kubernetes_validate.validate(as_pod("atoll", spec), KUBERNETES, strict=True)
    assert set(spec) <= {"supportedModelFormats", "protocolVersions", "annotations", "labels", *POD_FIELDS}
    assert all(f["name"] for f in spec["supportedModelFormats"])
    assert "onnx" in {f["name"] for f in spec["supportedModelFormats"]}
    assert spec["protocolVersions"] == ["v2", "grpc-v2"] and set(spec["protocolVersions"]) <= PROTOCOLS
    (container,) = spec["containers"]
    assert container["name"] == "kserve-container"  # the name KServe merges the predictor's settings into
    server = serve_config(container).server
    assert (server.host, server.repository) == ("0.0.0.0", "/mnt/models")  # where KServe puts the model
    assert (server.http_port, server.grpc_port) == (8080, 9000)  # KServe's ports for a v2 runtime
    assert spec["annotations"] == {"prometheus.kserve.io/port": str(server.metrics_port),
                                   "prometheus.kserve.io/path": "/metrics"}


def test_the_service_monitor_scrapes_the_metrics_port_of_the_service():
    monitor, service = one("ServiceMonitor"), one("Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    spec = monitor["spec"]
    assert set(spec) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [(e["port"], e["path"]) for e in spec["endpoints"]] == [("metrics", "/metrics")]
    assert "metrics" in {p["name"] for p in service["spec"]["ports"]}


def test_a_real_atoll_serve_answers_the_probes_and_scrapes(tmp_path):
    """The DaemonSet's command line, with free ports and a small repository in place of the node's,
    run here: the probes' paths answer 200 and the metrics path answers on the metrics port."""
    (container,) = one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    args = list(container["args"][1:])
    for flag, value in (("--repository", str(tmp_path)), ("--http-port", "0"), ("--grpc-port", "0"),
                        ("--metrics-port", "0")):  # fmt: skip
        args[args.index(flag) + 1] = value
    with serving(tmp_path, "mobilenet_v3_small", *args) as server:
        (line,) = [m for m in map(SERVING.search, server.log) if m]
        http, metrics = line.groups()
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert request(http + container[probe]["httpGet"]["path"]) == 200, probe
        assert request(metrics + "/metrics") == 200
