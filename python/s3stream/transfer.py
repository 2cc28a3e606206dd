"""Moving batches of Buffers from DataLoader workers to the training loop with one copy.

Pickling a Buffer copies its bytes several times on the way through multiprocessing's pipe (out of
the Buffer, into the pickle, through the kernel, out again, into a new Buffer). For the raw bytes of
a batch that is most of a worker's CPU. Instead, ``s3stream.DataLoader`` has each worker copy the
batch's Buffers once into a single block of shared memory, which torch hands to the main process as
a file descriptor; there the Buffers come back as zero-copy views of that block.
"""

from __future__ import annotations

from typing import Any, Callable, List

import torch

from ._core import Buffer


class _Slot:
    """Where a Buffer's bytes lie in the block (a leaf, not a tuple, so _map does not enter it)."""

    __slots__ = ("offset", "length")

    def __init__(self, offset: int, length: int) -> None:
        self.offset, self.length = offset, length

    def __reduce__(self) -> Any:
        return (_Slot, (self.offset, self.length))


class PackedBatch:
    """A batch whose Buffers were moved into one shared-memory block."""

    __slots__ = ("tree", "block")

    def __init__(self, tree: Any, block: torch.Tensor) -> None:
        self.tree, self.block = tree, block


def _map(x: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuilds dicts, lists and tuples (named ones too) with fn applied to everything else."""
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

    def slot(x: Any) -> Any:
        if isinstance(x, Buffer):
            buffers.append(x)
            return _Slot(-1, len(x))
        return x

    tree = _map(batch, slot)
    if not buffers:
        return batch
    block = _shared_block(sum(len(b) for b in buffers))
    view = memoryview(block.numpy())
    offset = 0
    it = iter(buffers)

    def place(x: Any) -> Any:
        nonlocal offset
        if isinstance(x, _Slot):
            b = next(it)
            view[offset : offset + len(b)] = memoryview(b)
            placed = _Slot(offset, len(b))
            offset += len(b)
            return placed
        return x

    return PackedBatch(_map(tree, place), block)


def unpack(obj: Any) -> Any:
    if not isinstance(obj, PackedBatch):
        return obj
    owner = obj.block.numpy()
    return _map(obj.tree, lambda x: Buffer.view(owner, x.offset, x.length) if isinstance(x, _Slot) else x)


class PackingCollate:
    """Wraps a DataLoader's collate function so its output travels packed (see the module doc)."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch: Any) -> Any:
        return pack(self.collate_fn(batch))


__all__ = ["PackedBatch", "PackingCollate", "pack", "unpack"]
