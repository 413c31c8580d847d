"""The blocking docker-py operations of the container driver.

They run on a worker thread (through :class:`DockerGateway`) and take the blocking client; each handles
the Docker errors that are an expected outcome and turns a refusal into a mirbad_runtime exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._container_spec import MODEL_LABEL
from .exceptions import ImagePullError, LaunchRejectedError

if TYPE_CHECKING:
    import docker
    from docker import DockerClient
else:
    from ._lazy_modules import docker  # imported at its first use: see the module

# Internal to the container driver.
__all__: list[str] = []


def ensure_image(client: DockerClient, image: str) -> None:
    """Pull ``image`` unless Docker already has it, raising :class:`ImagePullError` when that fails."""
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pass
    else:
        return
    try:
        # Docker reports most pull failures inside the progress stream, with an HTTP 200.
        for event in client.api.pull(image, stream=True, decode=True):
            if isinstance(event, dict) and event.get("error"):
                raise ImagePullError(image, str(event["error"]))
    except docker.errors.APIError as exc:
        raise ImagePullError(image, str(exc.explanation or exc)) from exc


def ensure_network(client: DockerClient, name: str) -> None:
    """Create the bridge network ``name`` unless it exists."""
    # The name filter matches substrings, so compare the names exactly.
    if any(network.name == name for network in client.networks.list(names=[name])):
        return
    try:
        client.networks.create(name, driver="bridge", check_duplicate=True)
    except docker.errors.APIError as exc:
        # 409: another agent call created it a moment ago.
        if exc.status_code != 409:
            raise


def model_containers(
    client: DockerClient, model_id: str | None = None, *, network: str | None = None
) -> list[Mapping[str, Any]]:
    """Inspect every model container (of one model, when ``model_id`` is given), running or not.

    With ``network``, only the containers on that Docker network: an agent owns the models on its own
    network, so two agents sharing one dockerd (tests, a second fleet) never adopt or stop each other's.
    """
    label = MODEL_LABEL if model_id is None else f"{MODEL_LABEL}={model_id}"
    filters: dict[str, str | list[str] | bool] = {"label": label}
    if network is not None:
        filters["network"] = network
    containers = client.containers.list(all=True, filters=filters, ignore_removed=True)
    return [container.attrs for container in containers]


def create_and_start(client: DockerClient, arguments: dict[str, Any]) -> Mapping[str, Any]:
    """Create and start a container; a refusal is a :class:`LaunchRejectedError` and leaves nothing behind."""
    name = arguments["name"]
    try:
        container = client.containers.create(**arguments)
    except docker.errors.APIError as exc:
        if exc.status_code == 409:
            raise LaunchRejectedError(
                f"a container named {name} exists but carries no Mirbad labels"
            ) from exc
        raise LaunchRejectedError(f"Docker refused to create {name}: {exc.explanation or exc}") from exc
    try:
        container.start()
    except docker.errors.APIError as exc:
        remove_container(client, container.attrs["Id"])
        raise LaunchRejectedError(f"Docker could not start {name}: {exc.explanation or exc}") from exc
    container.reload()
    return dict(container.attrs)


def remove_container(client: DockerClient, container_id: str) -> None:
    """Remove a container, running or not; one already gone is fine, one going is waited for."""
    try:
        client.api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        # 409: Docker is already removing it (another caller asked first): the outcome we want, once
        # it is done, so that a stop answers Stopped rather than "removal in progress".
        if exc.status_code != 409:
            raise
        _wait_removed(client, container_id)


def _wait_removed(client: DockerClient, container_id: str) -> None:
    try:
        client.api.wait(container_id, condition="removed")
    except docker.errors.NotFound:
        pass  # gone before the wait began
    except OSError:
        pass  # the client's timeout: the removal goes on, and the status says Stopping meanwhile


def read_logs(client: DockerClient, container_id: str, tail: int) -> bytes:
    """The container's last ``tail`` log lines as Docker returns them."""
    try:
        return bytes(client.api.logs(container_id, tail=tail))
    except docker.errors.NotFound:
        # Removed between the listing and this read: it has no logs any more.
        return b""
    except docker.errors.APIError as exc:
        # 409: Docker is removing it ("marked for removal"); its logs are going away with it, and one
        # container on its way out must not fail the status of every other model.
        if exc.status_code != 409:
            raise
        return b""


def read_stats(client: DockerClient, container_id: str) -> Mapping[str, Any]:
    """One stats document of a running container (empty when it is gone or going)."""
    try:
        # one_shot: answer at once instead of waiting a second to sample the CPU twice.
        stats: Mapping[str, Any] = client.api.stats(container_id, stream=False, one_shot=True)
    except docker.errors.NotFound:
        return {}
    except docker.errors.APIError as exc:
        if exc.status_code != 409:
            raise
        return {}
    except ValueError:
        # A container that stops while dockerd answers gets a 200 with an empty body, which
        # docker-py fails to decode (requests' JSONDecodeError is a ValueError): it is going.
        return {}
    return stats


def next_chunk(stream: Any) -> bytes | None:
    """The next chunk of a log stream, or ``None`` at its end."""
    return next(stream, None)


def close_stream(stream: Any) -> None:
    """Close a docker-py log stream and its socket (from any thread: it unblocks a waiting reader)."""
    stream.close()
    # docker-py shuts the socket down but leaves the HTTP response (and the socket's fd) open.
    response = getattr(stream, "_response", None)
    if response is not None:
        response.close()


def log_text(line: bytes) -> str:
    """One log line as text (invalid UTF-8 replaced, no carriage return)."""
    return line.decode("utf-8", errors="replace").rstrip("\r")
