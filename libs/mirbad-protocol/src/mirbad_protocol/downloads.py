"""mirbad_protocol.downloads: model downloads: a request per source kind, the job and its progress, routes."""

from ._downloads import (
    DOWNLOAD_STATES,
    ROUTE_DOWNLOAD,
    ROUTE_DOWNLOAD_CANCEL,
    ROUTE_DOWNLOAD_RETRY,
    ROUTE_DOWNLOAD_SIZE,
    ROUTE_DOWNLOADS,
    DownloadFile,
    DownloadJob,
    DownloadList,
    DownloadRequest,
    DownloadSize,
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
    "ROUTE_DOWNLOAD_SIZE",
    "DownloadFile",
    "DownloadJob",
    "DownloadList",
    "DownloadRequest",
    "DownloadSize",
    "DownloadState",
    "HuggingFaceDownload",
    "OllamaDownload",
    "check_download_folder",
    "check_download_id",
]
