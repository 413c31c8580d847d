"""mirbad_protocol.downloads: model downloads: a request per source kind, the job and its progress, routes."""

from ._downloads import (
    DOWNLOAD_STATES,
    ROUTE_DOWNLOAD,
    ROUTE_DOWNLOAD_CANCEL,
    ROUTE_DOWNLOAD_RETRY,
    ROUTE_DOWNLOADS,
    DownloadFile,
    DownloadJob,
    DownloadList,
    DownloadRequest,
    DownloadState,
    HuggingFaceDownload,
    OllamaDownload,
    check_download_folder,
    check_download_id,
)

__all__ = [
    "DOWNLOAD_STATES",
    "ROUTE_DOWNLOAD",
    "ROUTE_DOWNLOADS",
    "ROUTE_DOWNLOAD_CANCEL",
    "ROUTE_DOWNLOAD_RETRY",
    "DownloadFile",
    "DownloadJob",
    "DownloadList",
    "DownloadRequest",
    "DownloadState",
    "HuggingFaceDownload",
    "OllamaDownload",
    "check_download_folder",
    "check_download_id",
]
