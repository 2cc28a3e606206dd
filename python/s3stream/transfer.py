"""Moving batches of Buffers from DataLoader workers to the training loop without copying them.

Pickling a Buffer copies its bytes several times on the way through multiprocessing's pipe (out of
the Buffer, into the pickle, through the kernel, out again, into a new Buffer); for the raw bytes of
a batch that is most of a worker's CPU. In the workers of ``s3stream.DataLoader``, and in those of any
DataLoader (torch's, one Lightning or Accelerate builds) reading an s3stream dataset, which sets them
up from its first read (``adopt_worker``); batches unpack themselves as they are unpickled:

* Each worker allocates its large Buffers (downloaded objects, shard ranges) in a shared arena
  (``_core._enable_shared_arena``: a sparse memfd whose blocks the native block cache recycles),
  which the main process maps once. A Buffer there travels as its offset: the loop reads the very
  bytes the network wrote.
* Other Buffers (small ones) are copied into one of the worker's pooled blocks (memfds, at most
  ``POOL_BLOCKS``), back to back. The blocks are reused: a fresh block of shared memory costs a page
  fault and a zeroed page every 4 KiB on both sides, which measured as much CPU as the copy and the
  socket reads together.
* A file descriptor crosses once, with the first batch that uses it (the main process opens it as
  ``/proc/<worker>/fd/<n>``); afterwards a batch carries only names, offsets and lengths.
* Release: the loop's views of a batch hold a lease. When the last one goes, the main process
  writes the batch's generation into its block's header; before packing its next batch the worker
  sees it, drops its references to the batch's arena Buffers and may refill the block.
* A worker whose pooled blocks are all held (the loop keeps old batches) sends the batch in a
  one-off shared-memory block with every byte copied, so keeping batches never stalls a worker.

Memory per worker: at most ``POOL_BLOCKS`` pooled blocks, each about the largest batch's copied
bytes, and the arena blocks of the batches the loop holds.
"""

from __future__ import annotations

import array
import mmap
import os
import struct
import threading
import weakref
from multiprocessing.reduction import DupFd
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from . import _core
from ._core import Buffer

POOL_BLOCKS = 6  # per worker: the batches queued ahead (prefetch_factor), the one in use, spares
_HEADER = 64  # [0:8) generation written by the worker, [8:16) generation released by the loop
_U64 = struct.Struct("<Q")  # the header's words
_GRAIN = 1 << 20  # block capacities are whole MiB, with a quarter of headroom for larger batches
# Address space for a worker's shared arena; memory is used only for the blocks in use at once.
ARENA_BYTES = int(os.environ.get("S3STREAM_WORKER_ARENA_BYTES", str(4 << 30)))


class _Hole:
    """Marks where a Buffer was; one shared instance, so a batch pickles no per-Buffer objects."""

    def __reduce__(self) -> str:
        return "HOLE"


HOLE = _Hole()


class _TensorHole:
    """Marks where a tensor was (its bytes travel in the block, see PackedBatch.tensors)."""

    def __reduce__(self) -> str:
        return "TENSOR_HOLE"


TENSOR_HOLE = _TensorHole()
_TENSOR_ALIGN = 64  # tensors in a block start at multiples of this: any dtype's alignment


class _PooledBlock:
    """A worker's reusable block: a memfd mapped here, and in the main process once received."""

    __slots__ = ("name", "fd", "mm", "capacity", "generation", "announced", "held")

    def __init__(self, name: str, capacity: int) -> None:
        self.name, self.capacity, self.generation, self.announced = name, capacity, 0, False
        self.held: Optional[List[Buffer]] = None  # arena Buffers of the batch, until it is released
        self.fd = os.memfd_create("s3stream-batch", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, _HEADER + capacity)
        self.mm = mmap.mmap(self.fd, _HEADER + capacity)

    def free(self) -> bool:
        return _U64.unpack_from(self.mm, 8)[0] == self.generation

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:  # a batch packed and unpacked in this very process still views it
            pass  # the mapping goes when the last view does
        os.close(self.fd)


class _WorkerPool:
    """This process's blocks (rebuilt after a fork: a child must not reuse its parent's)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.prefix = f"{self.pid}-{os.urandom(6).hex()}"
        self.blocks: List[_PooledBlock] = []
        self.created = 0
        self.retired: List[str] = []  # blocks closed here, for the main process to unmap
        self.arena: Optional[_Arena] = None  # set by worker_started

    def acquire(self, size: int) -> Optional[_PooledBlock]:
        free = [b for b in self.blocks if b.free()]
        for b in free:
            b.held = None  # the loop let go of the batch: its arena blocks go back to the cache
        fitting = [b for b in free if b.capacity >= size]
        if fitting:
            block = min(fitting, key=lambda b: b.capacity)
        elif len(self.blocks) < POOL_BLOCKS or free:
            if len(self.blocks) >= POOL_BLOCKS:  # replace the smallest free block with a larger one
                small = min(free, key=lambda b: b.capacity)
                self.blocks.remove(small)
                self.retired.append(small.name)
                small.close()
            capacity = -(-(size + size // 4) // _GRAIN) * _GRAIN
            try:
                block = _PooledBlock(f"{self.prefix}-{self.created}", capacity)
            except (AttributeError, OSError):  # no memfd here (not Linux) or out of memory
                return None
            self.created += 1
            self.blocks.append(block)
        else:
            return None
        block.generation += 1
        _U64.pack_into(block.mm, 0, block.generation)
        return block


_pool: Optional[_WorkerPool] = None


def _worker_pool() -> _WorkerPool:
    global _pool
    if _pool is None or _pool.pid != os.getpid():
        _pool = _WorkerPool()
    return _pool


class _Arena:
    """This process's shared arena, as the main process learns of it."""

    __slots__ = ("name", "fd", "size", "announced", "local")

    def __init__(self, name: str, fd: int, size: int) -> None:
        self.name, self.fd, self.size, self.announced = name, fd, size, False
        self.local: Optional[_Mapping] = None  # a mapping here, for batches unpacked where packed


def worker_started() -> None:
    """Called first in each DataLoader worker: from now on its large Buffers live in memory the
    main process can map (without it, batches are copied into pooled blocks)."""
    pool = _worker_pool()
    if pool.arena is not None:
        return
    try:
        fd = _core._enable_shared_arena(ARENA_BYTES)
    except OSError:  # e.g. no memfd here: the copying path still works
        return
    pool.arena = _Arena(f"{pool.prefix}-arena", fd, ARENA_BYTES)


class _Mapping:
    """The main process's mapping of one worker block."""

    __slots__ = ("mm", "view")

    def __init__(self, fd: int, size: int) -> None:
        try:
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.view = memoryview(self.mm)


_mappings: Dict[str, _Mapping] = {}
_mappings_lock = threading.Lock()  # batches are unpickled on DataLoader's pin-memory thread too


def _attach(name: str, size: int, fd: Optional["_WorkerFd"], retired: Tuple[str, ...]) -> _Mapping:
    """Unpickles a reference to a worker's pooled block or arena in the main process (fd: its
    descriptor, on its first trip only; size: the bytes to map)."""
    with _mappings_lock:
        for old in retired:
            _mappings.pop(old, None)  # unmapped once the last view of it is gone
        if fd is not None:
            _forget_dead_workers(name)
            _mappings[name] = _Mapping(fd.open(), size)
        try:
            return _mappings[name]
        except KeyError:
            raise RuntimeError(f"s3stream: a DataLoader worker sent batch block {name} before its memory; "
                               "this is a bug in s3stream.transfer, please report it") from None


def _forget_dead_workers(new_name: str) -> None:
    """Drops the mappings of workers that have exited (non-persistent workers start anew every
    epoch; without this the main process would keep every epoch's blocks mapped)."""
    alive: Dict[str, bool] = {}
    new_pid = new_name.split("-", 1)[0]
    for name in list(_mappings):
        pid, token = name.split("-")[:2]
        key = f"{pid}-{token}"
        if key not in alive:
            if new_pid == pid and not new_name.startswith(key + "-"):
                alive[key] = False  # the pid was reused by a new worker
            else:
                try:
                    os.kill(int(pid), 0)
                    alive[key] = True
                except ProcessLookupError:
                    alive[key] = False
                except PermissionError:
                    alive[key] = True
        if not alive[key]:
            del _mappings[name]


class _WorkerFd:
    """A worker's memfd on its way to the main process, which opens it as /proc/<pid>/fd/<n>: a
    plain open, checked against the file's identity. multiprocessing's DupFd, the fallback where
    /proc does not allow it, is a socket round trip to a thread of the busy worker: ~2 ms of the
    loop's time for each of the ~30 descriptors a fresh set of 8 workers sends per epoch. (The
    fallback's duplicate stays open in the worker until it exits: the arena and live blocks are
    open anyway, and the blocks retired for larger ones are few.)"""

    __slots__ = ("pid", "fd", "ident", "dup")

    def __init__(self, fd: int) -> None:
        st = os.fstat(fd)
        self.pid, self.fd, self.ident = os.getpid(), fd, (st.st_dev, st.st_ino)
        self.dup = DupFd(fd)

    def open(self) -> int:
        """A descriptor of the worker's memfd, owned by the caller."""
        try:
            fd = os.open(f"/proc/{self.pid}/fd/{self.fd}", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return self.dup.detach()
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) == self.ident:
            return fd
        os.close(fd)  # not the file the worker sent (it exited and its pid was reused)
        return self.dup.detach()


def _first_trip_fd(shared: Any) -> Optional[_WorkerFd]:
    """A pooled block's or arena's descriptor, with the first reference to it only: afterwards the
    main process has it mapped. (Pickled in order by the worker's queue, so it arrives first.)"""
    if shared.announced:
        return None
    shared.announced = True
    return _WorkerFd(shared.fd)


class _BlockRef:
    """How a pooled block travels: its name, plus its file descriptor the first time."""

    __slots__ = ("block", "retired")

    def __init__(self, block: _PooledBlock, retired: List[str]) -> None:
        self.block, self.retired = block, retired

    def __reduce__(self) -> Any:
        b = self.block
        return (_attach, (b.name, _HEADER + b.capacity, _first_trip_fd(b), tuple(self.retired)))


class _ArenaRef:
    """How a worker's arena travels: its name, plus its file descriptor the first time."""

    __slots__ = ("arena",)

    def __init__(self, arena: _Arena) -> None:
        self.arena = arena

    def __reduce__(self) -> Any:
        return (_attach, (self.arena.name, self.arena.size, _first_trip_fd(self.arena), ()))

    def mapping(self) -> _Mapping:
        """For a batch unpacked in the process that packed it (tests): the arena mapped here too."""
        if self.arena.local is None:
            self.arena.local = _Mapping(os.dup(self.arena.fd), self.arena.size)
        return self.arena.local


class PackedBatch:
    """A batch whose Buffers and tensors travel by reference, in traversal order.

    ``block`` is a shared tensor (a one-off block) or, once unpickled from a pooled block, the main
    process's mapping of it, whose bytes start at ``_HEADER`` and which carries ``generation``.
    With ``arena`` (the worker's arena), ``spans[i] >= 0`` is where Buffer ``i`` is in it; the
    Buffers with ``-1`` were copied into the block, back to back, from its start. ``tensors`` lists
    ``(dtype, shape, offset, nbytes)`` of the tensors copied into the block after them."""

    __slots__ = ("tree", "block", "lengths", "generation", "arena", "spans", "tensors", "size")

    def __init__(self, tree: Any, block: Any, lengths: array.array, generation: int = 0, arena: Any = None,
                 spans: Optional[array.array] = None, tensors: Tuple[Any, ...] = (), size: int = 0) -> None:
        self.tree, self.block, self.lengths, self.generation = tree, block, lengths, generation
        self.arena, self.spans, self.tensors, self.size = arena, spans, tensors, size

    def __reduce__(self) -> Any:
        # Unpickled straight into the batch: whichever loader receives it from a worker (s3stream's,
        # torch's, one Lightning or Accelerate built) hands the loop Buffers and tensors, never this.
        return (_arrive, (self.tree, self.block, self.lengths, self.generation, self.arena, self.spans,
                          self.tensors, self.size))


def _arrive(*fields: Any) -> Any:
    return unpack(PackedBatch(*fields))


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


def _travels_in_block(x: Any) -> bool:
    """A tensor torch would otherwise move into a fresh shared-memory file of its own (one file,
    one descriptor passed over a socket, one mapping per tensor per batch): a plain CPU tensor."""
    return (type(x) is torch.Tensor and x.device.type == "cpu" and x.layout == torch.strided
            and not x.requires_grad and not x.is_quantized and not x.is_nested and not x.is_shared())


def _layout(copied_bytes: int, tensors: List[torch.Tensor]) -> Tuple[List[Any], int]:
    """Where the tensors go in a block after ``copied_bytes`` of Buffers: their
    ``(dtype, shape, offset, nbytes)`` and the block's size."""
    meta, size = [], copied_bytes
    for t in tensors:
        size = -(-size // _TENSOR_ALIGN) * _TENSOR_ALIGN
        nbytes = t.numel() * t.element_size()
        meta.append((t.dtype, tuple(t.shape), size, nbytes))
        size += nbytes
    return meta, size


def pack(batch: Any, pooled: bool = True) -> Any:
    """Moves the batch's Buffers and CPU tensors into one block (pooled: a reusable one of this
    process's pool, for a batch that is about to be sent to the main process exactly once), or, for
    Buffers in this process's arena, refers to them where they are."""
    buffers: List[Buffer] = []
    tensors: List[torch.Tensor] = []

    def hole(x: Any) -> Any:
        if isinstance(x, Buffer):
            buffers.append(x)
            return HOLE
        if _travels_in_block(x):
            tensors.append(x.resolve_conj().resolve_neg().contiguous())
            return TENSOR_HOLE
        return x

    tree = _map(batch, hole)
    if not buffers and not tensors:
        return batch
    lengths = array.array("Q", (len(b) for b in buffers))
    pool = _worker_pool() if pooled else None
    arena = pool.arena if pool is not None else None
    spans = array.array("q", (b._arena_offset() for b in buffers)) if arena is not None and buffers else None
    if spans is not None and max(spans) < 0:
        spans = None
    copied = [i for i in range(len(buffers)) if spans is None or spans[i] < 0]
    tensor_meta, size = _layout(sum(lengths[i] for i in copied), tensors)
    block = pool.acquire(size) if pool is not None else None
    if block is not None:
        view, base = memoryview(block.mm), _HEADER
        ref: Any = _BlockRef(block, pool.retired)
        pool.retired = []
        if spans is not None:
            block.held = [buffers[i] for i in range(len(buffers)) if spans[i] >= 0]
    else:  # every pooled block is still held by the loop: a one-off block, with every byte in it
        spans, copied = None, range(len(buffers))
        tensor_meta, size = _layout(sum(lengths), tensors)
        shared = _shared_block(size)
        view, base, ref = memoryview(shared.numpy()), 0, shared
    offset = base
    for i in copied:
        n = lengths[i]
        view[offset : offset + n] = memoryview(buffers[i])
        offset += n
    for t, (_, _, at, nbytes) in zip(tensors, tensor_meta):
        if nbytes:
            dest = torch.frombuffer(view, dtype=torch.uint8, count=nbytes, offset=base + at)
            dest.copy_(t.reshape(-1).view(torch.uint8))
    del view
    return PackedBatch(tree, ref, lengths, block.generation if block is not None else 0,
                       _ArenaRef(arena) if spans is not None else None, spans, tuple(tensor_meta), size)


def _release(tokens: List[int], header: memoryview, generation: int) -> None:
    tokens.pop()  # atomic under the GIL: finalizers of one batch may run on different threads
    if not tokens:
        _U64.pack_into(header, 8, generation)


def unpack(obj: Any) -> Any:
    if not isinstance(obj, PackedBatch):
        return obj
    arena_owner: Any = None
    if isinstance(obj.block, (_Mapping, _BlockRef)):
        # One lease per batch (two owners with the arena): the views hold them, and when the last
        # goes the worker may reuse the block and the arena bytes. (A _BlockRef: the batch was
        # packed in this process and never pickled.)
        whole = obj.block.view if isinstance(obj.block, _Mapping) else memoryview(obj.block.block.mm)
        owner: Any = whole[_HEADER : _HEADER + obj.size]
        tokens = [1]
        weakref.finalize(owner, _release, tokens, whole[:_HEADER], obj.generation)
        if obj.arena is not None:
            arena = obj.arena if isinstance(obj.arena, _Mapping) else obj.arena.mapping()
            arena_owner = arena.view[:]
            tokens.append(1)
            weakref.finalize(arena_owner, _release, tokens, whole[:_HEADER], obj.generation)
    else:
        owner = memoryview(obj.block.numpy())
    spans = obj.spans
    tensors = iter(obj.tensors)
    index = 0
    offset = 0

    def fill(x: Any) -> Any:
        nonlocal index, offset
        if x is HOLE:
            n = obj.lengths[index]
            at = spans[index] if spans is not None else -1
            index += 1
            if at >= 0:
                return Buffer.view(arena_owner, at, n)
            view = Buffer.view(owner, offset, n)
            offset += n
            return view
        if x is TENSOR_HOLE:
            dtype, shape, at, nbytes = next(tensors)
            if not nbytes:
                return torch.empty(shape, dtype=dtype)
            # A view of the block (the tensor keeps `owner`, and so the lease, alive).
            return torch.frombuffer(owner, dtype=torch.uint8, count=nbytes, offset=at).view(dtype).view(shape)
        return x

    return _map(obj.tree, fill)


class PackingCollate:
    """Wraps a DataLoader's collate function so its output travels packed (see the module doc)."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch: Any) -> Any:
        return pack(self.collate_fn(batch))


def adopt_worker(fetcher: Any) -> None:
    """Sets up a DataLoader worker that s3stream.DataLoader did not start (a plain torch DataLoader,
    or one a framework built), from the dataset's first read in it: large Buffers go to the shared
    arena from now on, and ``fetcher`` (the worker's batch fetcher) packs what its collate function
    returns, as s3stream.DataLoader's workers do. Idempotent."""
    worker_started()
    collate = getattr(fetcher, "collate_fn", None)
    if collate is not None and not isinstance(collate, PackingCollate):
        fetcher.collate_fn = PackingCollate(collate)


__all__ = ["PackedBatch", "PackingCollate", "adopt_worker", "pack", "unpack"]
