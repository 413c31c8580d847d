"""deploy/k8s/: every manifest parses and holds together; validated against the Kubernetes schemas
with kubernetes-validate where it is installed, else by the structural checks here alone.

The structural checks are what a reviewer would look for: known kinds at their apiVersions, names
and namespaces, selectors that select the pod template, every volume mount, Secret, claim and named
port pointing at something that exists, and the command lines the real CLIs accept.
"""

from __future__ import annotations

import importlib
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirbad_agent.cli import _parser as agent_parser
from mirbad_master.cli import _parser as master_parser

K8S = Path(__file__).parents[2] / "deploy" / "k8s"
DOCKERFILE = Path(__file__).parents[2] / "deploy" / "docker" / "Dockerfile"
NAMESPACE = "mirbad"
API_VERSIONS = {
    "Namespace": "v1",
    "Secret": "v1",
    "PersistentVolumeClaim": "v1",
    "Service": "v1",
    "Deployment": "apps/v1",
    "DaemonSet": "apps/v1",
}
# The Kubernetes release kubernetes-validate checks against (its schemas ship with the package).
KUBERNETES_VERSION = "1.30"


def manifests() -> list[dict[str, Any]]:
    """Every object in the files kustomization.yaml lists, in order."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    found: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        found += [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc is not None]
    return found


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifests() if doc["kind"] == kind]


def one(kind: str, name: str) -> dict[str, Any]:
    [found] = [doc for doc in of_kind(kind) if doc["metadata"]["name"] == name]
    return found


def workloads() -> Iterator[dict[str, Any]]:
    yield from of_kind("Deployment")
    yield from of_kind("DaemonSet")


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_every_file_in_the_folder_is_applied() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    assert listed == {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def test_every_object_is_a_known_kind_at_its_api_version_with_a_name() -> None:
    kinds = [(doc["kind"], doc["apiVersion"]) for doc in manifests()]
    assert all(API_VERSIONS.get(kind) == version for kind, version in kinds), kinds
    names = [(doc["kind"], doc["metadata"]["name"]) for doc in manifests()]
    assert len(names) == len(set(names))
    for doc in manifests():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]
    assert one("Namespace", NAMESPACE)


def test_the_manifests_name_exactly_what_the_issue_asks_for() -> None:
    assert {doc["kind"] for doc in manifests()} == set(API_VERSIONS)
    master = one("Deployment", "mirbad-master")
    assert master["spec"]["replicas"] == 1
    assert master["spec"]["strategy"] == {"type": "Recreate"}  # one writer of the data directory
    agent = one("DaemonSet", "mirbad-agent")
    pod = agent["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"mirbad.io/agent": "true"}
    assert pod["hostNetwork"] is True
    paths = {volume["hostPath"]["path"] for volume in pod["volumes"] if "hostPath" in volume}
    assert {"/var/run/docker.sock", "/srv/mirbad/models", "/var/lib/mirbad-agent"} <= paths


@pytest.mark.parametrize("workload", list(workloads()), ids=lambda w: w["metadata"]["name"])
def test_each_workload_selects_its_pods_and_mounts_only_what_it_declares(workload: dict[str, Any]) -> None:
    template = workload["spec"]["template"]
    selector = workload["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    volumes = {volume["name"]: volume for volume in template["spec"]["volumes"]}
    for container in containers(workload):
        assert container["name"]
        assert container["image"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, mount
    for volume in volumes.values():
        if "secret" in volume:
            assert one("Secret", volume["secret"]["secretName"])
        if "persistentVolumeClaim" in volume:
            assert one("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])


def test_the_service_reaches_the_masters_ports_under_the_name_in_its_certificate() -> None:
    service = one("Service", "mirbad-master")
    master = one("Deployment", "mirbad-master")
    pod = master["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    named = {port["name"]: port["containerPort"] for port in pod["spec"]["containers"][0]["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= set(named)
    assert named == {"http": 8080, "enroll": 8443}
    # The enroll listener's certificate carries the pod's host name; agents enroll at that name.
    assert pod["spec"]["hostname"] == service["metadata"]["name"]
    [enroll] = of_kind("DaemonSet")[0]["spec"]["template"]["spec"]["initContainers"]
    env = {entry["name"]: entry.get("value") for entry in enroll["env"]}
    assert env["MIRBAD_ENROLL_URL"] == f"https://{service['metadata']['name']}:8443"


def test_the_containers_run_the_real_command_lines() -> None:
    master = one("Deployment", "mirbad-master")["spec"]["template"]["spec"]
    [init] = master["initContainers"]
    assert init["args"][0] == "mirbad"
    parsed = master_parser().parse_args(init["args"][1:])
    assert (parsed.command, parsed.action, str(parsed.data_dir)) == ("admin", "reset-password", "/data")
    mounts = {mount["name"]: mount["mountPath"] for mount in init["volumeMounts"]}
    secret = one("Secret", "mirbad-admin")
    assert parsed.password_file == Path(mounts["admin"]) / next(iter(secret["stringData"]))
    parsed = master_parser().parse_args(master["containers"][0]["args"][1:])
    assert (parsed.command, parsed.host, str(parsed.data_dir)) == ("up", "0.0.0.0", "/data")

    agent = one("DaemonSet", "mirbad-agent")["spec"]["template"]["spec"]["containers"][0]
    assert agent["args"][0] == "mirbad-agent"
    argv = [arg.replace("$(NODE_NAME)", "gpu-1") for arg in agent["args"][1:]]
    parsed = agent_parser().parse_args(argv)
    assert (parsed.command, parsed.node_name, parsed.docker) == ("serve", "gpu-1", True)
    mounted = {mount["mountPath"] for mount in agent["volumeMounts"]}
    # dockerd mounts these by their node paths: each is mounted at the path it has on the node.
    assert {str(parsed.state_dir), *map(str, parsed.model_root)} <= mounted


@pytest.mark.parametrize("workload", list(workloads()), ids=lambda w: w["metadata"]["name"])
def test_every_container_runs_under_the_images_tini(workload: dict[str, Any]) -> None:
    # `command:` replaces the image's ENTRYPOINT (tini): PID 1 would then neither reap the agent's
    # llama-server children nor forward SIGTERM. `args:` goes to the entrypoint, which runs a command
    # given to it (docs/deploy.md, Container images).
    for container in containers(workload):
        assert "command" not in container, container["name"]
        assert container["args"], container["name"]
    entrypoints = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("ENTRYPOINT")]
    assert entrypoints == [
        'ENTRYPOINT ["tini", "--", "mirbad-master-entrypoint"]',
        'ENTRYPOINT ["tini", "--", "mirbad-agent-entrypoint"]',
    ]
    for entrypoint in ("master-entrypoint.sh", "agent-entrypoint.sh"):
        # Arguments that are not options are run as they are.
        assert (
            'if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then\n    exec "$@"\nfi'
            in (DOCKERFILE.parent / "files" / entrypoint).read_text()
        )


@pytest.mark.deploy
def test_the_enroll_script_is_shellcheck_clean(tmp_path: Path) -> None:
    [enroll] = one("DaemonSet", "mirbad-agent")["spec"]["template"]["spec"]["initContainers"]
    shell, flag, script = enroll["args"]
    assert (shell, flag) == ("/bin/sh", "-c")
    assert "mirbad-agent enroll --master" in script
    path = tmp_path / "enroll.sh"
    path.write_text(f"#!/bin/sh\n{script}")
    result = subprocess.run(
        ["shellcheck", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout
    words = shlex.split(script.split("exec ", 1)[1].replace("\\\n", " "))
    assert words[:2] == ["mirbad-agent", "enroll"]


def test_the_schemas_accept_every_object() -> None:
    # A dev dependency: the Kubernetes schemas it ships, checked strictly (no field they do not name).
    validator = importlib.import_module("kubernetes_validate")
    for doc in manifests():
        validator.validate(doc, KUBERNETES_VERSION, strict=True)
