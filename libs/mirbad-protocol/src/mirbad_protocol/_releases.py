"""What a node runs its models with: its llama-server builds, its vLLM images, and image pulls.

The Releases page asks each node for these. A llama-server build is one catalogued executable with
what the binary says of itself (``llama-server --version``); an image is one the node's Docker holds.
A pull is a job on the agent: Docker's streaming pull, one job per image reference at a time, its
per-layer progress summed into one fraction the master polls.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final, Literal

from pydantic import Field, field_validator

from ._wire import WireModel

__all__ = [
    "IMAGE_PULL_STATES",
    "ROUTE_IMAGES",
    "ROUTE_IMAGE_PULL",
    "ROUTE_IMAGE_PULLS",
    "ROUTE_IMAGE_PULL_CANCEL",
    "ROUTE_LLAMA_SERVER_BUILDS",
    "AgentVersion",
    "ImageInfo",
    "ImageList",
    "ImagePull",
    "ImagePullList",
    "ImagePullRequest",
    "ImagePullState",
    "LayerProgress",
    "LlamaServerBinary",
    "LlamaServerBuildList",
    "NodeReleases",
    "ReleasesView",
    "check_image_reference",
    "split_image_reference",
]

ROUTE_LLAMA_SERVER_BUILDS: Final = "/releases/llama-server"
"""GET: :class:`LlamaServerBuildList`, every catalogued llama-server with what it reports of itself."""
ROUTE_IMAGES: Final = "/images"
"""GET: :class:`ImageList`, the vLLM images the node's Docker holds (404 on a node without Docker)."""
ROUTE_IMAGE_PULLS: Final = "/images/pulls"
"""GET: :class:`ImagePullList`; POST :class:`ImagePullRequest`: the new :class:`ImagePull` (202)."""
ROUTE_IMAGE_PULL: Final = "/images/pulls/{pull_id}"
"""GET: one :class:`ImagePull` with its progress."""
ROUTE_IMAGE_PULL_CANCEL: Final = "/images/pulls/{pull_id}/cancel"
"""POST (no body): stop a running pull; the job as it was left."""

ImagePullState = Literal["running", "completed", "failed", "cancelled"]
"""Where a pull is: transferring, done, or stopped (failed or cancelled)."""
IMAGE_PULL_STATES: Final = ("running", "completed", "failed", "cancelled")
"""Every :data:`ImagePullState`."""

# The image reference grammar of the distribution project (Docker's own), written out here.
_COMPONENT: Final = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART: Final = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN: Final = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]{{1,5}})?"
_TAG: Final = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST: Final = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE: Final = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?"
)
_NAME_MAX: Final = 255


def check_image_reference(reference: str) -> str:
    """``reference`` when it is an image reference Docker can pull (``[host[:port]/]path[:tag][@digest]``).

    Raises:
        ValueError: it does not parse (upper case in the path, an empty part, a bad tag or digest) or
            its name is longer than 255 characters.
    """
    match = _REFERENCE.fullmatch(reference)
    if match is None:
        raise ValueError(
            "not an image reference: expected [host[:port]/]name[:tag][@digest], "
            "the name in lower case (for example vllm/vllm-openai:v0.8.5)"
        )
    if len(match["name"]) > _NAME_MAX:
        raise ValueError(f"the image name is longer than {_NAME_MAX} characters")
    return reference


def split_image_reference(reference: str) -> tuple[str, str]:
    """The repository and the tag (or digest) of a checked reference; a bare name means ``latest``.

    Raises:
        ValueError: ``reference`` does not parse (see :func:`check_image_reference`).
    """
    match = _REFERENCE.fullmatch(check_image_reference(reference))
    assert match is not None  # checked just above
    return match["name"], match["digest"] or match["tag"] or "latest"


class LlamaServerBinary(WireModel):
    """One catalogued llama-server and what the binary reports of itself.

    Attributes:
        name: the catalogued logical name (``llama-server``).
        version: the catalogued version launch specs name.
        path: where the binary is on the node.
        sha256: the digest the catalogue pins.
        reported: the version line of ``llama-server --version`` (``version: 6123 (a1b2c3d)``).
        built_with: its build line (``built with cc (Debian 12.2.0) for x86_64-linux-gnu``).
        error: why the binary could not be asked (missing, not executable, silent); None when it answered.
    """

    name: str
    version: str
    path: str
    sha256: str = ""
    reported: str | None = None
    built_with: str | None = None
    error: str | None = None


class LlamaServerBuildList(WireModel):
    """The answer of :data:`ROUTE_LLAMA_SERVER_BUILDS`, in catalogue order."""

    builds: list[LlamaServerBinary] = Field(default_factory=list)


class ImageInfo(WireModel):
    """One image of the node's Docker.

    Attributes:
        id: Docker's image id (``sha256:...``).
        tags: its repository tags (``vllm/vllm-openai:v0.8.5``); empty for a dangling image.
        size_bytes: its size as Docker reports it.
        created: when it was built; None when Docker did not say.
        in_use: whether a Mirbad model container runs from it.
    """

    id: str
    tags: list[str] = Field(default_factory=list)
    size_bytes: int = 0
    created: datetime | None = None
    in_use: bool = False


class ImageList(WireModel):
    """The answer of :data:`ROUTE_IMAGES`: newest first."""

    images: list[ImageInfo] = Field(default_factory=list)


class ImagePullRequest(WireModel):
    """The body of a pull start: the image reference to pull (``registry/name:tag``)."""

    image: str

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image_reference(value)


class LayerProgress(WireModel):
    """One layer of a pull, as Docker's progress stream last told it.

    Attributes:
        id: the layer's short id.
        status: Docker's word for where it is (``Downloading``, ``Extracting``, ``Pull complete`` ...).
        current_bytes: bytes downloaded so far.
        total_bytes: the layer's size; None until Docker says it.
    """

    id: str
    status: str = ""
    current_bytes: int = 0
    total_bytes: int | None = None


class ImagePull(WireModel):
    """A pull job on a node and its progress.

    Attributes:
        id: the job's id.
        image: the reference being pulled.
        state: see :data:`ImagePullState`.
        started_at: when the job began.
        finished_at: when it ended; None while it runs.
        layers: each layer's progress, in the order Docker first named them.
        current_bytes: bytes downloaded over every layer of known size.
        total_bytes: the sum of the known layer sizes (0 until Docker names one).
        status: Docker's last overall status line (``Status: Downloaded newer image for ...``).
        error: why it failed or was cancelled.
    """

    id: str
    image: str
    state: ImagePullState
    started_at: datetime
    finished_at: datetime | None = None
    layers: list[LayerProgress] = Field(default_factory=list)
    current_bytes: int = 0
    total_bytes: int = 0
    status: str | None = None
    error: str | None = None

    @property
    def fraction(self) -> float | None:
        """How much is done, 0 to 1 (1 once completed); None while no layer size is known."""
        if self.state == "completed":
            return 1.0
        if self.total_bytes <= 0:
            return None
        return min(1.0, self.current_bytes / self.total_bytes)


class ImagePullList(WireModel):
    """Every pull job the agent keeps (the running ones and the last finished ones), newest first."""

    pulls: list[ImagePull] = Field(default_factory=list)


# ---------------------------------------------------------------- the admin API's views


class AgentVersion(WireModel):
    """One node's agent version beside the master's.

    Attributes:
        node_id: the node.
        version: what its agent reports; None while it never answered.
        reachable: whether its last poll answered.
        skew: the warning when its major.minor differs from the master's (or cannot be compared).
    """

    node_id: str
    version: str | None = None
    reachable: bool = False
    skew: str | None = None


class ReleasesView(WireModel):
    """``GET /api/releases``: the master's version and every agent's, with the skew warnings.

    Attributes:
        master_version: the installed ``mirbad-master``.
        agents: one entry per node, in id order.
        skew_rule: the rule the warnings follow, in words.
    """

    master_version: str
    agents: list[AgentVersion] = Field(default_factory=list)
    skew_rule: str = ""


class NodeReleases(WireModel):
    """``GET /api/nodes/{id}/releases``: what one node runs its models with.

    Attributes:
        node_id: the node.
        builds: its catalogued llama-servers.
        images: its vLLM images (empty on a node without Docker).
        pulls: its image pulls, newest first.
        can_pull: whether its agent offers image pulls (Docker, ``images.pull``).
        problems: a part that could not be read, in words (an older agent, Docker not answering).
    """

    node_id: str
    builds: list[LlamaServerBinary] = Field(default_factory=list)
    images: list[ImageInfo] = Field(default_factory=list)
    pulls: list[ImagePull] = Field(default_factory=list)
    can_pull: bool = False
    problems: list[str] = Field(default_factory=list)
