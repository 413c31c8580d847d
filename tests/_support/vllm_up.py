"""``mirbad up`` for the vLLM tier: the real vLLM CPU image, a Docker network and port ranges of its own."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import docker

from mirbad_protocol.benchmarks import PresetSizes
from mirbad_runtime import MODEL_LABEL

from .asgi_server import free_port
from .mirbad_up import Up
from .vllm_image import ensure_vllm_image

TINY_PRESET = PresetSizes(
    levels=[1, 2],
    max_seqs_cap=2,
    repetitions=1,
    short_output_tokens=[4],
    cold_prompt_tokens=[1_000_000],  # never fits the tiny model's 256 tokens: the cold prompts are skipped
    shared_prefix_tokens=48,
    shared_prefix_questions=2,
    question_tokens=4,
    tool_call_tokens=8,
    embedding_levels=[1, 2],
    # The default inputs run to 256 words: past the tiny model's 256-token context.
    embedding_input_words=[2, 4, 8, 16],
)
"""The preset suite's sizes for the tier's tiny model (the product runs the spec's)."""


@contextlib.contextmanager
def vllm_up(
    tmp_path: Path,
    run_id: str,
    *,
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[Up]:
    """A ``mirbad up`` over ``tmp_path / "data"`` (not started) running the image in a network of its own.

    Model containers whose id ends with ``run_id`` and the network are removed afterwards, whatever the
    test left (the dockerd is shared by parallel tests, so nothing else is touched).

    Args:
        tmp_path: the test's folder; the data directory and the agent's extra settings go there.
        run_id: this test's id, the suffix of its model ids and of its network's name.
        settings: agent settings laid over the tier's (the Docker network, CPU-only, port ranges).
        env: environment variables for ``mirbad up`` besides the tier's.
    """
    image = ensure_vllm_image()
    data_dir = tmp_path / "data"
    (data_dir / "models").mkdir(parents=True, exist_ok=True)
    first = min(free_port(), 65_000)
    network = f"mirbad-test-{run_id}"
    agent_config = tmp_path / "agent-extra.json"
    agent_settings: dict[str, Any] = {
        "graceful_shutdown_s": 5,
        "docker": {
            "network": network,
            "gpus": False,
            "stop_timeout_s": 5,
            "port_range_start": first,
            "port_range_end": first + 19,
        },
        "process": {"port_range_start": first + 20, "port_range_end": first + 39},
        **(settings or {}),
    }
    agent_config.write_text(json.dumps(agent_settings))
    environment = {**os.environ, "MIRBAD_HEALTH_POLL_S": "0.5", "MIRBAD_TEST_IMAGE": image, **(env or {})}
    started = Up(data_dir, free_port(), free_port(), agent_config, environment)
    client = docker.from_env(version="auto", timeout=60)
    try:
        yield started
    finally:
        started.kill_everything()
        for container in client.containers.list(all=True, filters={"label": MODEL_LABEL}):
            if container.labels.get(MODEL_LABEL, "").endswith(run_id):
                container.remove(force=True)
        for stale in client.networks.list(names=[network]):
            stale.remove()
        client.close()
