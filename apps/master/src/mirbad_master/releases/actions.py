"""Every read and change of the releases room, whoever asks (the admin API, the portal).

Versions come from the node monitor's cache (each agent reports its version with its runtimes), so
listing them asks no node. The skew rule: an agent whose major.minor differs from the master's gets a
warning (the agent contract is additive within a minor series, so a patch difference is fine); a
version that does not start with ``major.minor`` cannot be compared and is warned about too. A node's
builds, images and pulls are asked of its agent when shown. A pull start and a cancel are audited.
The changelog is the ``CHANGELOG.md`` packed into the wheel (see apps/master/pyproject.toml), else the
repository's own (a checkout, an editable install).
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import re
from pathlib import Path
from typing import Final

from mirbad_master._composition import MasterServices
from mirbad_master._llama_server_build import LlamaServerBuild
from mirbad_master.exceptions import ApiError
from mirbad_orchestration import NodeError, NodeFeatureMissingError
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.admin import AdminErrorCode
from mirbad_protocol.agent import FeatureFlag
from mirbad_protocol.releases import AgentVersion, ImagePull, ImagePullRequest, NodeReleases, ReleasesView

__all__ = [
    "SKEW_RULE",
    "cancel_image_pull",
    "changelog_text",
    "image_pull",
    "image_pulls",
    "master_version",
    "node_releases",
    "read_pull_request",
    "release_nodes",
    "releases_view",
    "start_image_pull",
    "version_skew",
]

SKEW_RULE: Final = "an agent whose major.minor version differs from the master's gets a warning"
"""The skew rule in words, as the page and the API state it."""
_MAJOR_MINOR: Final = re.compile(r"^v?(\d+)\.(\d+)(?:[.+\-a-z]|$)")
_CHANGELOG: Final = "CHANGELOG.md"


def master_version() -> str:
    """The installed version of the ``mirbad-master`` distribution."""
    try:
        return importlib.metadata.version("mirbad-master")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def version_skew(master: str, agent: str) -> str | None:
    """The warning for an agent at ``agent`` beside a master at ``master``; None when they agree.

    They agree when both start with the same ``major.minor`` (``0.1.0`` and ``0.1.7``).
    """
    ours, theirs = _MAJOR_MINOR.match(master), _MAJOR_MINOR.match(agent)
    if ours is None or theirs is None:
        return f"cannot compare agent {agent} with master {master}: not major.minor versions"
    if ours.groups() == theirs.groups():
        return None
    return f"agent {agent} differs from master {master} in major.minor: upgrade the older one"


def releases_view(services: MasterServices) -> ReleasesView:
    """The master's version and every known node's agent version (from the cache), in node id order."""
    master = master_version()
    agents = []
    for state in sorted(services.cache.nodes(), key=lambda s: s.node_id):
        version = state.info.version if state.info is not None else None
        skew = version_skew(master, version) if version is not None else None
        agents.append(
            AgentVersion(node_id=state.node_id, version=version, reachable=state.reachable, skew=skew)
        )
    return ReleasesView(master_version=master, agents=agents, skew_rule=SKEW_RULE)


async def release_nodes(services: MasterServices) -> list[tuple[str, LlamaServerBuild | None]]:
    """Every node the monitor knows, in id order, with ``mirbad up``'s llama-server build on the local one."""
    local = {record.id for record in await services.nodes.list() if record.local}
    return [
        (state.node_id, services.llama_server_build if state.node_id in local else None)
        for state in sorted(services.cache.nodes(), key=lambda s: s.node_id)
    ]


async def node_releases(services: MasterServices, node_id: str) -> NodeReleases:
    """What ``node_id`` runs its models with, asked of its agent; a part it cannot tell is a problem.

    Raises:
        UnknownNodeError: no such node.
        NodeError: the agent could not be reached (its info is the first thing asked).
    """
    client = await services.client_of(node_id)
    features = (await client.info()).features
    problems: list[str] = []
    releases = NodeReleases(node_id=node_id, can_pull=FeatureFlag.IMAGES_PULL in features)
    builds, images, pulls = releases.builds, releases.images, releases.pulls
    try:
        if FeatureFlag.LLAMA_SERVER_BUILDS in features:
            builds = await client.llama_server_builds()
        else:
            problems.append("its agent is too old to report its llama-server builds")
        if releases.can_pull:
            images = await client.images()
            pulls = await client.image_pulls()
    except NodeError as exc:
        problems.append(str(exc))
    update = {"builds": builds, "images": images, "pulls": pulls, "problems": problems}
    return releases.model_copy(update=update)


def read_pull_request(data: object) -> ImagePullRequest:
    """A pull request as a person's input: unknown fields refused, a bad reference 422 naming ``image``.

    Raises:
        ApiError: 422 ``invalid_image_reference`` for a string that is not an image reference.
        InvalidFieldError: not an object, no ``image``, a non-string one or an unknown field.
    """
    try:
        return ImagePullRequest.from_user_input(data)
    except InvalidFieldError as exc:
        if exc.field == "image" and isinstance(data, dict) and isinstance(data.get("image"), str):
            raise ApiError(422, AdminErrorCode.INVALID_IMAGE_REFERENCE, str(exc), field="image") from None
        raise


async def start_image_pull(services: MasterServices, node_id: str, image: str, actor: str) -> ImagePull:
    """Start pulling ``image`` (what a person typed) on ``node_id`` and audit it.

    Raises:
        ApiError: 422 ``invalid_image_reference``: ``image`` does not parse (the node is not asked).
        UnknownNodeError: no such node.
        NodeFeatureMissingError: the node's agent offers no image pulls (no Docker, or an older agent).
        AgentRequestError: the agent refused (``invalid_image_reference``, ``pull_conflict``).
    """
    image = read_pull_request({"image": image}).image
    client = await services.client_of(node_id)
    if FeatureFlag.IMAGES_PULL not in (await client.info()).features:
        raise NodeFeatureMissingError(node_id, FeatureFlag.IMAGES_PULL.value, field="image")
    job = await client.start_image_pull(image)
    await services.audit.record(actor, "image.pull", job.id, node_id=node_id, detail=image)
    return job


async def cancel_image_pull(services: MasterServices, node_id: str, pull_id: str, actor: str) -> ImagePull:
    """Stop a running pull (audited); the job as it was left."""
    client = await services.client_of(node_id)
    job = await client.cancel_image_pull(pull_id)
    await services.audit.record(actor, "image.pull.cancel", pull_id, node_id=node_id, detail=job.image)
    return job


async def image_pulls(services: MasterServices, node_id: str) -> list[ImagePull]:
    """The node's image pulls with their progress."""
    return await (await services.client_of(node_id)).image_pulls()


async def image_pull(services: MasterServices, node_id: str, pull_id: str) -> ImagePull:
    """One of the node's image pulls with its per-layer progress."""
    return await (await services.client_of(node_id)).image_pull(pull_id)


def changelog_text() -> str | None:
    """The changelog shipped with the master (or the checkout's); None when neither is there."""
    packed = importlib.resources.files("mirbad_master").joinpath(_CHANGELOG)
    if packed.is_file():
        return packed.read_text(encoding="utf-8")
    for folder in Path(__file__).resolve().parents:
        candidate = folder / _CHANGELOG
        if candidate.is_file() and (folder / "pyproject.toml").is_file() and (folder / "apps").is_dir():
            return candidate.read_text(encoding="utf-8")
    return None
