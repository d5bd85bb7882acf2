"""Checks on several CPU processes (imported as ``from gloo import spawn``).

``spawn(check, *args)`` starts ``world`` processes with ``torch.multiprocessing``, joins them in one
gloo process group on 127.0.0.1 (a free port; collectives time out after 120 s; one torch thread
each), runs ``check(rank, *args)`` on every rank and tears the group down; an exception on any rank
fails the caller with that rank's traceback. ``check`` must be a module-level function (it is pickled
by name).
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(check: Callable[..., None], *args: Any, world: int = 2) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_run, args=(check, world, free_port(), args), nprocs=world, join=True)


def _run(rank: int, check: Callable[..., None], world: int, port: int, args: tuple[Any, ...]) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # what launchers set; DeepSpeed reads them
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world)
    )
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        check(rank, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
