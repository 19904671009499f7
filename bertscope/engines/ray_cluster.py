"""Where the Ray engine runs: ``--engine ray`` (a cluster started on this machine for the command)
or ``ray:ADDRESS`` (a running one: ``auto``, or ``HOST:PORT``), connecting to it, and how many
model actors it takes. Ray is imported only here and only when an engine is asked for.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertscope.errors import BertScopeError


@dataclass(frozen=True)
class ClusterSpec:
    """Where the passes run: ``address`` None starts a Ray cluster on this machine (its CPUs and
    GPUs); "auto" or "HOST:PORT" joins a running one. ``actors``: how many model copies (default:
    one per GPU of the cluster, else one per CPU)."""

    address: str | None = None
    actors: int | None = None


def import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as err:
        raise BertScopeError("--engine ray needs Ray Data: pip install -r requirements-cluster.txt") from err
    return ray


def worker_env() -> dict[str, str]:
    """What an actor needs of this process's environment: our settings and the import path."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("BERTSCOPE_", "HF_", "TRANSFORMERS_"))}
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the bertscope package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return env


def _reachable(address: str | None, seconds: float = 5.0) -> None:
    """A HOST:PORT that answers (Ray itself would keep retrying for minutes)."""
    if address is None or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise BertScopeError(f"A Ray address is auto or HOST:PORT, not {address!r}.")
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as err:
        raise BertScopeError(f"No Ray cluster at {address}: {err.strerror or err}.") from err


@contextmanager
def ray_cluster(engine: ClusterSpec) -> Iterator[Any]:
    """Ray, connected: a cluster started here (and shut down after), a running one joined, or
    the one this process already initialised (left as it was)."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    _reachable(engine.address)
    try:
        ray.init(address=engine.address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                 configure_logging=True, runtime_env={"env_vars": worker_env()})
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = engine.address or "this machine"
        raise BertScopeError(f"No Ray cluster at {where}: {str(err).splitlines()[0]}") from err
    try:
        yield ray
    finally:
        ray.shutdown()


def actor_resources(ray: Any, engine: ClusterSpec) -> tuple[int, dict]:
    """(how many actors, each one's resources): one per GPU, else one per CPU."""
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), max(1, int(resources.get("CPU", 1)))
    if engine.actors is not None and engine.actors < 1:
        raise BertScopeError("The Ray engine needs at least one actor.")
    if gpus:
        return engine.actors or gpus, {"num_gpus": 1, "num_cpus": max(1, cpus // gpus)}
    return engine.actors or cpus, {"num_cpus": 1}
