"""Moving batches of Buffers from DataLoader workers to the training loop with one copy.

Pickling a Buffer copies its bytes several times on the way through multiprocessing's pipe (out of
the Buffer, into the pickle, through the kernel, out again, into a new Buffer). For the raw bytes of
a batch that is most of a worker's CPU. Instead, ``s3stream.DataLoader`` has each worker copy the
batch's Buffers once into a single block of shared memory, which torch hands to the main process as
a file descriptor; there the Buffers come back as zero-copy views of that block.
"""

from __future__ import annotations

import array
from typing import Any, Callable, List

import torch

from ._core import Buffer


class _Hole:
    """Marks where a Buffer was; one shared instance, so a batch pickles no per-Buffer objects."""

    def __reduce__(self) -> str:
        return "HOLE"


HOLE = _Hole()


class PackedBatch:
    """A batch whose Buffers were moved into one shared-memory block, in traversal order."""

    __slots__ = ("tree", "block", "lengths")

    def __init__(self, tree: Any, block: torch.Tensor, lengths: array.array) -> None:
        self.tree, self.block, self.lengths = tree, block, lengths

    def __reduce__(self) -> Any:
        return (PackedBatch, (self.tree, self.block, self.lengths))


def _map(x: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuilds dicts, lists and tuples (named ones too), in a fixed order, with fn applied to
    everything else."""
    if isinstance(x, dict):
        mapped = {k: _map(v, fn) for k, v in x.items()}
        if type(x) is dict:
            return mapped
        try:
            return type(x)(mapped)
        except TypeError:  # e.g. defaultdict: its constructor wants a factory first
            return mapped
    if isinstance(x, list):
        return [_map(v, fn) for v in x]
    if isinstance(x, tuple):
        items = [_map(v, fn) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    return fn(x)


def _shared_block(size: int) -> torch.Tensor:
    # Allocated in shared memory from the start: torch would otherwise copy it there when sending.
    try:
        return torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(size))
    except (AttributeError, RuntimeError):
        return torch.empty(size, dtype=torch.uint8).share_memory_()


def pack(batch: Any) -> Any:
    buffers: List[Buffer] = []

    def hole(x: Any) -> Any:
        if isinstance(x, Buffer):
            buffers.append(x)
            return HOLE
        return x

    tree = _map(batch, hole)
    if not buffers:
        return batch
    lengths = array.array("Q", (len(b) for b in buffers))
    block = _shared_block(sum(lengths))
    view = memoryview(block.numpy())
    offset = 0
    for b, n in zip(buffers, lengths):
        view[offset : offset + n] = memoryview(b)
        offset += n
    return PackedBatch(tree, block, lengths)


def unpack(obj: Any) -> Any:
    if not isinstance(obj, PackedBatch):
        return obj
    owner = obj.block.numpy()
    spans = iter(obj.lengths)
    offset = 0

    def fill(x: Any) -> Any:
        nonlocal offset
        if x is HOLE:
            n = next(spans)
            view = Buffer.view(owner, offset, n)
            offset += n
            return view
        return x

    return _map(obj.tree, fill)


class PackingCollate:
    """Wraps a DataLoader's collate function so its output travels packed (see the module doc)."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch: Any) -> Any:
        return pack(self.collate_fn(batch))


__all__ = ["PackedBatch", "PackingCollate", "pack", "unpack"]
