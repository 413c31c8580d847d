"""Model downloads on a node: Hugging Face repositories and Ollama models into the model roots.

:class:`DownloadManager` runs the jobs; :func:`plan_huggingface` and :func:`plan_ollama` resolve what
a request fetches; :func:`fetch_file` moves and verifies one file; :class:`NetworkLimits` bounds every
call to a source.
"""

from ._digests import FileDigest, check_git_sha1, check_sha256
from ._failures import unexpected_failure
from ._manager import (
    DEFAULT_HF_ENDPOINT,
    DEFAULT_OLLAMA_REGISTRY,
    DEFAULT_RETRY_WINDOW_S,
    TEMP_PREFIX,
    DownloadManager,
)
from ._network import MAX_INFO_BYTES, NetworkLimits, RateFloor, read_capped
from ._records import JobRecord, JobRecords
from ._sources import (
    OLLAMA_LAYER_FILES,
    OLLAMA_MANIFEST_MEDIA_TYPE,
    DownloadPlan,
    PlannedFile,
    check_file_path,
    plan_huggingface,
    plan_ollama,
)
from ._space import DEFAULT_SPACE_MARGIN_BYTES, FreeSpaceProbe, SpaceGuard, disk_free_bytes, file_system_of
from ._transfer import PARTIAL_SUFFIX, fetch_file, on_disk_bytes

__all__ = [
    "DEFAULT_HF_ENDPOINT",
    "DEFAULT_OLLAMA_REGISTRY",
    "DEFAULT_RETRY_WINDOW_S",
    "DEFAULT_SPACE_MARGIN_BYTES",
    "MAX_INFO_BYTES",
    "OLLAMA_LAYER_FILES",
    "OLLAMA_MANIFEST_MEDIA_TYPE",
    "PARTIAL_SUFFIX",
    "TEMP_PREFIX",
    "DownloadManager",
    "DownloadPlan",
    "FileDigest",
    "FreeSpaceProbe",
    "JobRecord",
    "JobRecords",
    "NetworkLimits",
    "PlannedFile",
    "RateFloor",
    "SpaceGuard",
    "check_file_path",
    "check_git_sha1",
    "check_sha256",
    "disk_free_bytes",
    "fetch_file",
    "file_system_of",
    "on_disk_bytes",
    "plan_huggingface",
    "plan_ollama",
    "read_capped",
    "unexpected_failure",
]
