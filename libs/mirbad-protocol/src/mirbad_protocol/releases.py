"""mirbad_protocol.releases: what a node runs models with: llama-server binaries, vLLM images, pulls.

With the master's view of every node's releases (the Releases page and ``/api/releases``).
"""

from ._releases import (
    IMAGE_PULL_STATES,
    ROUTE_IMAGE_PULL,
    ROUTE_IMAGE_PULL_CANCEL,
    ROUTE_IMAGE_PULLS,
    ROUTE_IMAGES,
    ROUTE_LLAMA_SERVER_BUILDS,
    AgentVersion,
    ImageInfo,
    ImageList,
    ImagePull,
    ImagePullList,
    ImagePullRequest,
    ImagePullState,
    LayerProgress,
    LlamaServerBinary,
    LlamaServerBuildList,
    NodeReleases,
    ReleasesView,
    check_image_reference,
    split_image_reference,
)

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
