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
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch.utils.data

from . import _core
from . import collate as _collate  # noqa: F401  (registers Buffer batching)
from .client import Client, default_client, release_at_exit
from .distributed import rank_and_world, worker_and_count
from .errors import InvalidArgumentError
from .consumers import caller, detect, shard_layout, wrapped_by_shard
from .resume import PLAN_VERSION, REMAINDERS, Pass, check_state, continue_passes, samples_per_rank, split_for
from .shard_index import ShardIndex, cache_dir, load_indexes
from .shared_epoch import SharedEpoch, SharedEpochMixin
from .transfer import adopt_worker
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


class ShardDataset(SharedEpochMixin, torch.utils.data.IterableDataset):
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
        for name, value in (("batch_size", 1 if batch_size is None else batch_size), ("interleave", interleave),
                            ("shuffle_chunks", shuffle_chunks),
                            ("max_bytes_ahead", AHEAD_BUDGET if max_bytes_ahead is None else max_bytes_ahead),
                            ("piece_size", piece_size)):
            if not isinstance(value, int) or value < 1:
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
        # set_epoch / load_state_dict reach (persistent) workers through it, and the worker that reads a
        # pass's last sample advances the epoch for the next pass through it.
        self._shared = SharedEpoch()
        self._shard_set: Any = None
        self._shard_set_pid: Optional[int] = None
        release_at_exit(self)
        self._stripe = int(_core.EpochPlan.default_stripe(self._native_shards(), chunk_bytes))
        self._pass: Optional[Tuple[int, List[Pass]]] = None  # (epoch, passes) of the latest iteration here
        self._yielded = 0  # samples that iteration yielded in this process
        self._worker_resume: Optional[Tuple[int, List[Pass], int]] = None  # set in a worker: (epoch, passes, skip)
        self._warned_batch = False
        self._iter_batch: Optional[int] = None  # the batch size the latest iteration dealt to workers
        self._worker_skip = 0
        self._resume_batch: Optional[int] = None  # the batch size a worker's restored position counts in

    def adopt_batch_size(self, batch_size: Optional[int]) -> None:
        """Called by s3stream.DataLoader with its batch size: batches are the unit dealt to workers."""
        if batch_size is None or batch_size == self.batch_size:
            return
        if self.batch_size is not None:
            print(f"s3stream: ShardDataset(batch_size={self.batch_size}) differs from the DataLoader's batch_size="
                  f"{batch_size}; the order will depend on num_workers", file=sys.stderr)
            return
        self.batch_size = int(batch_size)

    @property
    def _plan_batch_size(self) -> int:
        return self.batch_size or 1

    # -- the resume position, shared with worker processes (set_epoch, epoch: SharedEpochMixin) ----
    def _world(self) -> int:
        return rank_and_world(self._rank_arg, self._world_arg)[1]

    def _fresh_pass(self, world: int) -> List[Pass]:
        return [(world, self._stripe, self.remainder, 0)]

    def _restored(self) -> Optional[List[Pass]]:
        """The passes of the position load_state_dict restored, if it belongs to the current epoch."""
        return self._shared.restored()

    def _next_pass(self) -> Tuple[int, List[Pass], int]:
        """What the next iteration in this process reads (_peek_pass); a position torchdata
        restored in this worker applies to that one iteration only."""
        resume, self._worker_resume = self._peek_pass(), None
        return resume

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

    def pass_length(self) -> int:
        """Samples per rank the next iteration delivers (fewer than ``len()`` after a resume)."""
        _, passes, _ = self._peek_pass()
        return split_for(passes, self.total_samples).per_rank - passes[-1][3]

    def _peek_pass(self) -> Tuple[int, List[Pass], int]:
        """(epoch, passes, skip): a position restored in this worker by torchdata, else the shared
        one, else the current epoch from its start."""
        if self._worker_resume is not None:
            return self._worker_resume
        passes = self._restored()
        return self.epoch, passes if passes is not None else self._fresh_pass(self._world()), 0

    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """Where the epoch stands. ``consumed``: samples the training loop received in the current
        iteration (s3stream.DataLoader passes it); by default, what this process yielded itself
        (right for num_workers=0). In a DataLoader worker (torchdata's StatefulDataLoader asks each
        worker), the worker's own position, which load_state_dict restores in the same worker."""
        if consumed is None and self._pass is not None:
            (epoch, passes), done = self._pass, self._yielded  # what this process read itself
        else:  # the pass the workers read (or the next one), and what the loop received of it
            epoch, passes, _ = self._peek_pass()
            done = int(consumed or 0)
        *last, start = passes[-1]
        state: Dict[str, Any] = {"plan": PLAN_VERSION, "epoch": epoch,
                                 "passes": [list(p) for p in passes[:-1]] + [[*last, start + done]],
                                 "consumed": start + done, "world_size": last[0], "remainder": self.remainder,
                                 **self._identity()}
        worker, num_workers = worker_and_count()
        if torch.utils.data.get_worker_info() is not None:
            # A worker only knows its own samples: its position is its share's, not the rank's.
            state["passes"][-1][3] = start
            state["consumed"] = start
            state["worker"] = {"id": worker, "num_workers": num_workers, "batch_size": self._iter_batch,
                               "consumed": self._worker_skip + self._yielded}
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The next iteration continues the saved epoch: nothing is replayed, nothing skipped,
        whatever the number of DataLoader workers and ranks now (a state saved on any one rank
        serves every rank of a job of any size: elastic resume)."""
        epoch, passes = check_state(state, self._identity(), component="ShardDataset", total=self.total_samples)
        worker_state = state.get("worker")
        if worker_state is not None:
            self._load_worker_state(epoch, passes, worker_state)
            return
        passes = continue_passes(passes, self._world(), self._stripe, self.remainder)
        if passes[-1][3] >= split_for(passes, self.total_samples).per_rank:
            epoch, passes = epoch + 1, []  # the saved epoch is complete: the next one starts
        if torch.utils.data.get_worker_info() is not None:
            # In a worker (a state loaded there by hand or by a framework): this worker's copy only,
            # never the array the other workers and the main process share.
            self._worker_resume = (epoch, passes or self._fresh_pass(self._world()), 0)
            return
        self._shared.restore(epoch, passes)

    def _load_worker_state(self, epoch: int, passes: List[Pass], worker_state: Any) -> None:
        worker, num_workers = worker_and_count()
        ok = isinstance(worker_state, dict) and worker_state.get("id") == worker and \
            worker_state.get("num_workers") == num_workers and isinstance(worker_state.get("consumed"), int)
        if not ok or torch.utils.data.get_worker_info() is None:
            raise InvalidArgumentError(
                f"cannot resume: this state is DataLoader worker {worker_state!r:.80}'s own position, which only "
                "that worker can continue (torchdata's StatefulDataLoader restores it there, with the same "
                "num_workers); save the position with s3stream.DataLoader.state_dict() to resume elsewhere")
        if passes[-1][:3] != (self._world(), self._stripe, self.remainder):
            raise InvalidArgumentError(
                "cannot resume: a DataLoader worker's own position continues only the same split (world size "
                f"{passes[-1][0]}); s3stream.DataLoader.state_dict() saves one that resumes at any world size")
        self._worker_resume = (epoch, passes, int(worker_state["consumed"]))
        self._resume_batch = worker_state.get("batch_size")

    # -- iteration ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Samples per rank in a whole epoch (the same on every rank)."""
        per_rank = samples_per_rank(self.total_samples, self._world(), self.remainder)
        shard = wrapped_by_shard(self, caller())
        # Accelerate's IterableDatasetShard divides len() by the number of processes, taking it for
        # the whole stream's; what it yields here is this rank's share.
        return per_rank * shard.num_processes if shard is not None else per_rank

    def plan(self, epoch: Optional[int] = None, passes: Optional[List[Pass]] = None, *,
             world_size: Optional[int] = None, rank: Optional[int] = None) -> Any:
        """The native epoch plan for this rank (for inspection and tests)."""
        my_rank, world = rank_and_world(self._rank_arg, self._world_arg)
        world = world if world_size is None else world_size
        passes = passes or self._fresh_pass(world)
        o = _core.PlanOptions()
        o.seed, o.epoch = self.seed, self.epoch if epoch is None else epoch
        o.world_size, o.rank, o.shuffle = passes[-1][0], my_rank if rank is None else rank, self.shuffle
        o.remainder = _core.Remainder.drop if passes[-1][2] == "drop" else _core.Remainder.pad
        o.batch_size, o.interleave = self._iter_batch or self._plan_batch_size, self.interleave
        o.chunk_bytes, o.shuffle_chunks, o.stripe = self.chunk_bytes, self.shuffle_chunks, passes[-1][1]
        remaining = None if len(passes) == 1 else split_for(passes, self.total_samples).remaining
        return _core.EpochPlan.make(self._native_shards(), o, remaining)

    def _batch_for(self, detected: Optional[int]) -> int:
        if detected is None:
            return self._plan_batch_size
        if self.batch_size is not None and detected != self.batch_size and not self._warned_batch:
            self._warned_batch = True
            print(f"s3stream: ShardDataset(batch_size={self.batch_size}) but the DataLoader takes batches of "
                  f"{detected}; dealing batches of {detected} to its workers", file=sys.stderr)
        return detected

    def __iter__(self) -> Iterator[Any]:
        # A generator: its body runs at the first next(), where the caller is DataLoader's fetcher
        # asking for a batch (consumers.py reads the batch size there), not at iter().
        consumer = detect(self, caller())
        if torch.utils.data.get_worker_info() is not None:
            adopt_worker(consumer.fetcher)  # batches cross to the loop by reference, whoever built the loader
        rank, world = rank_and_world(self._rank_arg, self._world_arg)
        if consumer.accelerate_dispatch:
            rank, world = 0, 1  # Accelerate reads for every process on process 0 and splits batches itself
        self._iter_batch = self._batch_for(consumer.batch_size)
        epoch, passes, skip = self._next_pass()
        if skip and self._resume_batch != self._iter_batch:
            raise InvalidArgumentError(
                f"cannot resume this DataLoader worker: its position counts batches of {self._resume_batch}, "
                f"the DataLoader now takes {self._iter_batch}; resume with the saved batch size")
        if passes[-1][0] != world:  # the world changed since the position was saved: continue it elastically
            passes = continue_passes(passes, world, self._stripe, self.remainder)
        worker, num_workers = worker_and_count()
        plan = self.plan(epoch, passes, world_size=world, rank=rank)
        ahead = self.max_bytes_ahead
        if ahead is None:
            ahead = default_ahead(num_workers)
        start = passes[-1][3]
        reader = _core.ShardReader(self._native_shards(), plan, worker, num_workers, start, ahead, self.piece_size,
                                   skip)
        self._pass, self._yielded, self._worker_skip = (epoch, passes), 0, skip
        last = plan.samples_per_rank - 1
        if start > last:  # nothing left of the epoch
            self._advance(epoch)
        samples = self._samples(reader, epoch, last)
        if consumer.shard is not None:
            samples = shard_layout(samples, consumer.shard, world, self._iter_batch)
        yield from samples

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
