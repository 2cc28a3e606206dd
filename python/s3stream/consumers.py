"""Who is iterating a dataset, read from the call stack when its iterator first runs.

Frameworks build the DataLoader themselves (Lightning, Accelerate, torchdata's StatefulDataLoader)
and never tell the dataset its batch size, which the epoch plan deals to workers in units of. The
fetcher of torch's DataLoader asks an iterable dataset's iterator for one batch at a time, so the
first request names it. Accelerate's wrappers split what they iterate between processes again; they
are recognised so that the dataset can hand them what they expect instead of losing samples.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any, Iterator, List, Optional

from .errors import InvalidArgumentError

_MAX_DEPTH = 256


@dataclass(frozen=True)
class Consumer:
    # Samples DataLoader's fetcher takes from the iterator per batch (None: not a DataLoader's fetcher).
    batch_size: Optional[int] = None
    # Accelerate's DataLoaderDispatcher: process 0 reads for every process and splits batches itself.
    accelerate_dispatch: bool = False
    # Accelerate's IterableDatasetShard around this dataset: keeps slice `rank` of each group of
    # `world` batches of `batch` samples.
    shard: Any = None
    # The DataLoader fetcher asking (it holds the collate function of a worker).
    fetcher: Any = None
    # Lightning's fit loop is resuming a run from a checkpoint through a loader it cannot checkpoint.
    lightning_resume_lost: bool = False


def _fetch_code() -> Any:
    from torch.utils.data._utils.fetch import _IterableDatasetFetcher

    return _IterableDatasetFetcher.fetch.__code__


def _map_fetch_code() -> Any:
    from torch.utils.data._utils.fetch import _MapDatasetFetcher

    return _MapDatasetFetcher.fetch.__code__


def _accelerate(obj: Any, name: str) -> bool:
    cls = type(obj)
    return cls.__name__ == name and cls.__module__.startswith("accelerate")


def _lightning_resume_lost(frame: Optional[FrameType]) -> bool:
    """Whether Lightning's fit loop (up the stack: a forked worker still holds its parent's frames)
    is resuming from a checkpoint while one of its training loaders has no state_dict: Lightning then
    neither restores its position nor tells an iterable dataset the epoch (it sets samplers' only)."""
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        owner = frame.f_locals.get("self")
        cls = type(owner)
        if cls.__name__ == "_FitLoop" and cls.__module__.startswith(("lightning.", "pytorch_lightning.")):
            resuming = bool(getattr(owner, "restarting", False) or getattr(owner, "is_resuming", False))
            combined = getattr(owner, "_combined_loader", None)
            loaders = getattr(combined, "flattened", None) or []
            return resuming and any(not callable(getattr(dl, "state_dict", None)) for dl in loaders)
        frame, depth = frame.f_back, depth + 1
    return False


def under_accelerate_dispatch(frame: Optional[FrameType]) -> bool:
    """Whether an Accelerate DataLoaderDispatcher is iterating (anywhere up the stack: a forked
    DataLoader worker still holds its parent's frames)."""
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        if _accelerate(frame.f_locals.get("self"), "DataLoaderDispatcher"):
            return True
        frame, depth = frame.f_back, depth + 1
    return False


def detect(dataset: Any, frame: Optional[FrameType]) -> Consumer:
    """What is iterating ``dataset``, from ``frame`` (its iterator's caller) upwards."""
    fetch = _fetch_code()
    batch_size: Optional[int] = None
    shard = fetcher = None
    start = frame
    depth = 0
    while frame is not None and depth < _MAX_DEPTH and batch_size is None:
        owner = frame.f_locals.get("self")
        if shard is None and _accelerate(owner, "IterableDatasetShard") and owner.dataset is dataset:
            shard = owner
        if frame.f_code is fetch:
            index = frame.f_locals.get("possibly_batched_index")
            batch_size = len(index) if getattr(owner, "auto_collation", False) and index is not None else 1
            fetcher = owner
        frame, depth = frame.f_back, depth + 1
    return Consumer(batch_size=batch_size, accelerate_dispatch=under_accelerate_dispatch(start), shard=shard,
                    fetcher=fetcher, lightning_resume_lost=_lightning_resume_lost(start))


def map_fetcher(frame: Optional[FrameType]) -> Any:
    """The map-style DataLoader fetcher calling into a dataset from ``frame`` upwards, if any."""
    fetch = _map_fetch_code()
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        if frame.f_code is fetch:
            return frame.f_locals.get("self")
        frame, depth = frame.f_back, depth + 1
    return None


def wrapped_by_shard(dataset: Any, frame: Optional[FrameType]) -> Any:
    """The IterableDatasetShard of Accelerate calling into ``dataset`` from ``frame``, if it is one."""
    owner = frame.f_locals.get("self") if frame is not None else None
    return owner if _accelerate(owner, "IterableDatasetShard") and owner.dataset is dataset else None


def forward_state(shard: Any, dataset: Any) -> None:
    """Gives Accelerate's IterableDatasetShard around ``dataset`` the dataset's state_dict and
    load_state_dict. torchdata's StatefulDataLoader (Accelerate's use_stateful_dataloader) saves and
    restores the position of the dataset it holds, which is the shard: without them it would save none
    and on resume replay the saved number of batches from a fresh iterator. On this instance only (a
    worker's copy and a spawned worker's pickle carry them too)."""
    if "state_dict" not in vars(shard):
        shard.state_dict, shard.load_state_dict = dataset.state_dict, dataset.load_state_dict


def shard_layout(samples: Iterator[Any], shard: Any, world: int, batch_size: int) -> Iterator[Any]:
    """This rank's samples laid out so that Accelerate's IterableDatasetShard, which keeps slice
    ``process_index`` of every group of ``num_processes`` batches, keeps exactly them: the other
    slices are placeholders it drops, so no process reads another's data. A last short batch is
    completed from the first samples, as IterableDatasetShard completes its own (none with
    drop_last, which then drops it, as it asks)."""
    if shard.split_batches or shard.num_processes != world or shard.batch_size != batch_size:
        raise InvalidArgumentError(
            f"Accelerate splits this s3stream dataset into {shard.num_processes} processes with batches of "
            f"{shard.batch_size} (split_batches={shard.split_batches}), but it is split for {world} ranks with "
            f"batches of {batch_size}: prepare the DataLoader with split_batches=False on the job's ranks")
    before = [None] * (shard.process_index * batch_size)
    after = [None] * ((shard.num_processes - shard.process_index - 1) * batch_size)
    first: List[Any] = []
    batch: List[Any] = []
    for sample in samples:
        batch.append(sample)
        if len(batch) == batch_size:
            yield from before
            yield from batch
            yield from after
            first = first or batch
            batch = []
    if batch and not shard.drop_last:
        fill = first or batch
        while len(batch) < batch_size:
            batch += fill[: batch_size - len(batch)]
        yield from before
        yield from batch
        yield from after


def caller(levels: int = 2) -> Optional[FrameType]:
    try:
        return sys._getframe(levels)
    except ValueError:
        return None


__all__ = ["Consumer", "caller", "detect", "forward_state", "map_fetcher", "shard_layout", "under_accelerate_dispatch",
           "wrapped_by_shard"]
