"""ShardDataset: an IterableDataset over tar shards in the WebDataset layout.

The native engine reads each worker's share of the epoch plan (docs/epoch_plan.md) with coalesced
ranged GETs kept in flight ahead of the loop, parses tar members without copying them, and hands
samples over as dicts: ``{"jpg": Buffer, "cls": Buffer, "__key__": "...", "__url__": "s3://...",
"__index__": position}``.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from . import _core
from . import collate as _collate  # noqa: F401  (registers Buffer batching)
from .client import Client, default_client, release_at_exit
from .consumers import caller
from .distributed import rank_and_world
from .errors import InvalidArgumentError
from .planned_iterable import PlannedIterable
from .resume import REMAINDERS, SEED_MASK, Pass, check_order_options, split_for
from .shard_index import ShardIndex, cache_dir, load_indexes
from .urls import shard_uris

MiB = 1 << 20
AHEAD_BUDGET = 256 * MiB  # fetched ahead across a DataLoader's workers, by default (see max_bytes_ahead)


def default_ahead(num_workers: int) -> int:
    """Bytes each of ``num_workers`` readers fetches ahead by default: a share of AHEAD_BUDGET,
    between 16 and 64 MiB."""
    return min(64 * MiB, max(16 * MiB, AHEAD_BUDGET // num_workers))
MIN_PIECE = 64 << 10  # smaller pieces would mean a request per few samples


def _keep_hint(urls: Union[str, Sequence[str]], client: Client, kept: int, directory: str) -> str:
    """One line: the indexes just built stay on this machine, and how to store them for all."""
    given = [urls] if isinstance(urls, str) else list(urls)
    args = [shlex.quote(u) for u in given[:3]] + (["..."] if len(given) > 3 else [])
    endpoint = client._options.get("endpoint_url")
    command = " ".join(["s3stream"] + (["--endpoint-url", shlex.quote(endpoint)] if endpoint else []) + ["index"] + args)
    return (f"s3stream: kept {kept} new shard indexes in this machine's cache ({directory}), not beside the shards; "
            f"to store them there for every machine, run `{command}` or pass write_index=True")


class ShardDataset(PlannedIterable):
    """Samples from tar shards, every sample exactly once per epoch across ranks and workers.

    Args:
        urls: a list of shard URIs, a brace pattern (``s3://b/train-{000000..000127}.tar``), or a
            prefix to list. ``file://`` URIs and local paths work too.
        client: the :class:`s3stream.Client` to read with (default: from the environment).
        transform: applied to each sample dict (e.g. ``s3stream.decode()``).
        shuffle, seed: the epoch's order is a pure function of (shards, seed, epoch, world size,
            rank); call :meth:`set_epoch` each epoch (s3stream.DataLoader does it for you).
        batch_size: the DataLoader's batch size (s3stream.DataLoader fills it in when left None).
            Batches are dealt to workers in DataLoader's own round-robin order, which makes the
            order independent of ``num_workers`` and resume exact.
        remainder: ``"drop"`` the samples that do not split evenly across ranks, or ``"pad"`` by
            repeating samples from the start of the epoch; either way every rank gets the same count.
        rank, world_size: default from torch.distributed, else RANK / WORLD_SIZE, else 0 / 1.
        interleave, chunk_bytes, shuffle_chunks: shards read round-robin at once, consecutive
            bytes read together, and the chunk-level shuffle buffer.
        max_bytes_ahead: per worker, bytes fetched ahead of the consumer (the memory bound). Default:
            ``AHEAD_BUDGET`` (256 MiB) shared by the DataLoader's workers, between 16 and 64 MiB each
            (more workers each need less ahead, and every byte ahead is memory a fresh worker must
            fault in).
        missing: ``"error"`` (default) for a missing shard, or ``"skip"`` it (see ``skipped_shards``).
        build_index: build the indexes that shards lack (default), or raise InvalidArgumentError
            naming the ``s3stream index`` command that builds them.
        write_index: where an index built now is kept. By default (None) and with False, in the
            local cache only: the dataset's bucket is read, never written. When the default has built
            indexes, one line on stderr says how to store them for every machine instead. True
            writes a sidecar beside each shard (``train-000000.tar.idx.json``) that every machine
            then reads; a sidecar that cannot be written (refused, not implemented, a lost
            connection) leaves that index in the local cache, with one warning, and never fails the
            dataset. Existing sidecars are read either way. ``s3stream index URL`` writes them ahead.
        index_cache_dir: the local cache (default: ``$S3STREAM_CACHE_DIR`` or
            ``~/.cache/s3stream/index``). Its entries record the shard's ETag and size: a changed
            shard is indexed again. See :mod:`s3stream.shard_index`.
    """

    _component = "ShardDataset"

    def __init__(
        self,
        urls: Union[str, Sequence[str]],
        *,
        client: Optional[Client] = None,
        transform: Optional[Callable[[Dict[str, Any]], Any]] = None,
        shuffle: bool = True,
        seed: int = 0,
        batch_size: Optional[int] = None,
        remainder: str = "drop",
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        interleave: int = 4,
        chunk_bytes: int = 4 * MiB,
        shuffle_chunks: int = 64,
        max_bytes_ahead: Optional[int] = None,
        piece_size: int = 8 * MiB,
        missing: str = "error",
        build_index: bool = True,
        write_index: Optional[bool] = None,
        index_cache_dir: Optional[str] = None,
        progress: bool = True,
    ) -> None:
        super().__init__()
        if remainder not in REMAINDERS:
            raise InvalidArgumentError(f"remainder must be 'drop' or 'pad', got {remainder!r}")
        check_order_options(shuffle, seed)
        for name, value in (("batch_size", 1 if batch_size is None else batch_size), ("interleave", interleave),
                            ("chunk_bytes", chunk_bytes), ("shuffle_chunks", shuffle_chunks),
                            ("max_bytes_ahead", AHEAD_BUDGET if max_bytes_ahead is None else max_bytes_ahead),
                            ("piece_size", piece_size)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 1 << 63:
                raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
        if piece_size < MIN_PIECE:
            raise InvalidArgumentError(f"piece_size must be at least {MIN_PIECE // 1024} KiB (one GET per piece), "
                                       f"got {piece_size}")
        self.client = client if client is not None else default_client()
        self.transform = transform
        self.shuffle, self.seed, self.batch_size, self.remainder = shuffle, seed, batch_size, remainder
        self.interleave, self.chunk_bytes, self.shuffle_chunks = interleave, chunk_bytes, shuffle_chunks
        self.max_bytes_ahead, self.piece_size = max_bytes_ahead, piece_size
        self._rank_arg, self._world_arg = rank, world_size
        rank_and_world(rank, world_size)  # validate now

        uris = shard_uris(urls, self.client)
        indexes, report = load_indexes(uris, self.client, build=build_index, write="beside" if write_index else "cache",
                                       missing=missing, local_cache=index_cache_dir, progress=progress)
        if write_index is None and report.written_to_cache:
            print(_keep_hint(urls, self.client, report.written_to_cache, index_cache_dir or cache_dir()),
                  file=sys.stderr)
        self.shards: List[ShardIndex] = [indexes[u] for u in uris if u in indexes]
        self.skipped_shards: List[str] = report.missing
        self.index_report = report
        if self.skipped_shards:
            print(f"s3stream: skipping {len(self.skipped_shards)} missing shards (first: {self.skipped_shards[0]})",
                  file=sys.stderr)
        self.total_samples = sum(s.samples for s in self.shards)
        if self.total_samples == 0:
            raise InvalidArgumentError(f"the dataset is empty: its {len(uris)} shards hold no samples ({uris[0]} ...)")
        self._init_position()
        self._shard_set: Any = None
        self._shard_set_pid: Optional[int] = None
        release_at_exit(self)
        self._stripe = int(_core.EpochPlan.default_stripe(self._native_shards(), chunk_bytes))

    def adopt_batch_size(self, batch_size: Optional[int]) -> None:
        """Called by s3stream.DataLoader with its batch size: batches are the unit dealt to workers."""
        if batch_size is None or batch_size == self.batch_size:
            return
        if self.batch_size is not None:
            print(f"s3stream: ShardDataset(batch_size={self.batch_size}) differs from the DataLoader's batch_size="
                  f"{batch_size}; the order will depend on num_workers", file=sys.stderr)
            return
        self.batch_size = int(batch_size)

    def _total(self) -> int:
        return self.total_samples

    def fingerprint(self) -> str:
        """Identifies the shard listing: a resumed state must come from the same data."""
        h = hashlib.sha256()
        for s in self.shards:
            h.update(f"{s.uri}\0{s.etag}\0{s.samples}\n".encode())
        return h.hexdigest()[:16]

    def _identity(self) -> Dict[str, Any]:
        # What fixes the epoch's global sequence: it must be the same for a state to apply.
        return {"seed": self.seed, "shuffle": self.shuffle, "fingerprint": self.fingerprint(),
                "sequence": [self.interleave, self.chunk_bytes, self.shuffle_chunks]}

    # -- iteration ---------------------------------------------------------------------------------
    def plan(self, epoch: Optional[int] = None, passes: Optional[List[Pass]] = None, *,
             world_size: Optional[int] = None, rank: Optional[int] = None) -> Any:
        """The native epoch plan for this rank (for inspection and tests)."""
        my_rank, world = rank_and_world(self._rank_arg, self._world_arg)
        world = world if world_size is None else world_size
        passes = passes or self._fresh_pass(world)
        o = _core.PlanOptions()
        o.seed, o.epoch = self.seed & SEED_MASK, self.epoch if epoch is None else epoch
        o.world_size, o.rank, o.shuffle = passes[-1][0], my_rank if rank is None else rank, self.shuffle
        o.remainder = _core.Remainder.drop if passes[-1][2] == "drop" else _core.Remainder.pad
        o.batch_size, o.interleave = self._iter_batch or self.batch_size or 1, self.interleave
        o.chunk_bytes, o.shuffle_chunks, o.stripe = self.chunk_bytes, self.shuffle_chunks, passes[-1][1]
        remaining = None if len(passes) == 1 else split_for(passes, self.total_samples).remaining
        return _core.EpochPlan.make(self._native_shards(), o, remaining)

    def __iter__(self) -> Iterator[Any]:
        # A generator: its body runs at the first next(), where the caller is DataLoader's fetcher
        # asking for a batch (consumers.py reads the batch size there), not at iter().
        pass_ = self._start_pass(caller())
        if pass_.idle:
            return
        plan = self.plan(pass_.epoch, pass_.passes, world_size=pass_.world, rank=pass_.rank)
        ahead = self.max_bytes_ahead
        if ahead is None:
            ahead = default_ahead(pass_.num_workers)
        start = pass_.passes[-1][3]
        reader = _core.ShardReader(self._native_shards(), plan, pass_.worker, pass_.num_workers, start, ahead,
                                   self.piece_size, pass_.skip)
        last = plan.samples_per_rank - 1
        if start > last:  # nothing left of the epoch
            self._advance(pass_.epoch)
        yield from self._laid_out(self._samples(reader, pass_.epoch, last), pass_)

    def _samples(self, reader: Any, epoch: int, last: int) -> Iterator[Any]:
        transform = self.transform
        while True:
            sample = reader.next()
            if sample is None:
                return
            if sample["__index__"] == last:
                self._advance(epoch)  # before the yield: the consumer may never ask again
            self._yielded += 1
            yield transform(sample) if transform is not None else sample

    def _advance(self, epoch: int) -> None:
        """A pass over ``epoch`` read its last sample: the next pass reads the next epoch."""
        self._shared.advance(epoch)

    def _native_shards(self) -> Any:
        # Native state never crosses a fork: each process builds its own (cheap: no I/O).
        if self._shard_set is None or self._shard_set_pid != os.getpid():
            entries = [(s.uri, s.etag, s.offsets, s.gzip) for s in self.shards]
            shard_set = _core.ShardSet.make(self.client._native_client(), entries)
            self._shard_set, self._shard_set_pid = shard_set, os.getpid()
        return self._shard_set

    # -- pickling (spawn workers): configuration and indexes, no native handles -------------------
    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_shard_set"] = None
        state["_shard_set_pid"] = None
        return state  # the shared epoch pickles itself (shared memory to a spawned worker only)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        release_at_exit(self)

    def _drop_native(self) -> None:
        self._shard_set, self._shard_set_pid = None, None

    def __repr__(self) -> str:
        shards = f"{len(self.shards)} shard" + ("" if len(self.shards) == 1 else "s")
        return (f"s3stream.ShardDataset({shards}, {self.total_samples} samples, "
                f"shuffle={self.shuffle}, seed={self.seed}, epoch={self.epoch})")


__all__ = ["ShardDataset"]
