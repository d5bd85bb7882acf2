"""Multi-process tests on CPU: ranks spawned by the test itself, joined in a gloo group over 127.0.0.1,
each collective bounded by a timeout, the group destroyed however the rank ends."""

from __future__ import annotations

import datetime
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def gloo_group(rank: int, port: int, world_size: int, *, timeout_s: int = 120) -> Iterator[None]:
    """This process as ``rank`` of a gloo group of ``world_size`` on 127.0.0.1 (one thread: CPUs are shared)."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn(worker: Callable[..., Any], nprocs: int = 2) -> None:
    """``worker(rank, port)`` in ``nprocs`` spawned processes; a failure on any rank raises here."""
    torch.multiprocessing.spawn(worker, args=(free_port(),), nprocs=nprocs, join=True)
