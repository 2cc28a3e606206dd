"""Where this process stands in a distributed run: its rank and world size, and, inside a DataLoader
worker, its worker id and the number of workers.

Both functions are cheap and import nothing heavy: torch is consulted only when the process has
already imported it (a process that has not imported torch cannot have initialised
torch.distributed, and is not a DataLoader worker), so ``import s3stream`` works without torch.
"""

from __future__ import annotations

import operator
import os
import sys
from typing import Optional, Tuple

from .errors import InvalidArgumentError


def _as_int(value: object, what: str) -> int:
    if isinstance(value, bool):  # bool is an int subclass; True as a rank is always a mistake
        raise InvalidArgumentError(f"{what} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidArgumentError(f"{what} must be an integer, got {value!r}") from None


def _from_torch_distributed() -> Optional[Tuple[int, int]]:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        import torch.distributed as dist
    except ImportError:  # a torch build without distributed support
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.get_rank(), dist.get_world_size()


def _from_environment() -> Tuple[Optional[int], Optional[int]]:
    out = []
    for name in ("RANK", "WORLD_SIZE"):
        raw = os.environ.get(name)
        if raw is None or raw.strip() == "":
            out.append(None)
            continue
        try:
            out.append(int(raw))
        except ValueError:
            raise InvalidArgumentError(
                f"the environment variable {name}={raw!r} is not an integer (torchrun sets RANK and "
                "WORLD_SIZE; unset them or pass rank=/world_size= explicitly)"
            ) from None
    return out[0], out[1]


def rank_and_world(rank: Optional[int] = None, world_size: Optional[int] = None) -> Tuple[int, int]:
    """This process's ``(rank, world_size)``.

    Each value comes from, in order: the argument when it is not None; torch.distributed when it is
    initialised; the ``RANK`` / ``WORLD_SIZE`` environment variables (set by torchrun); else 0 / 1.

    Raises:
        InvalidArgumentError: a non-integer value, ``world_size < 1``, or a rank outside
            ``[0, world_size)``.
    """
    if rank is None or world_size is None:
        found = _from_torch_distributed()
        env_rank, env_world = found if found is not None else _from_environment()
        if rank is None:
            rank = env_rank if env_rank is not None else 0
        if world_size is None:
            world_size = env_world if env_world is not None else 1
    rank = _as_int(rank, "rank")
    world_size = _as_int(world_size, "world_size")
    if world_size < 1:
        raise InvalidArgumentError(f"world_size must be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise InvalidArgumentError(
            f"rank {rank} is outside world_size {world_size} (ranks are 0..{world_size - 1}); "
            "check the rank=/world_size= arguments or the RANK/WORLD_SIZE environment variables"
        )
    return rank, world_size


def worker_and_count() -> Tuple[int, int]:
    """``(worker id, number of workers)`` inside a DataLoader worker process, else ``(0, 1)``."""
    if sys.modules.get("torch") is None:  # DataLoader workers always have torch imported
        return 0, 1
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    if info is None:
        return 0, 1
    return int(info.id), int(info.num_workers)


__all__ = ["rank_and_world", "worker_and_count"]
