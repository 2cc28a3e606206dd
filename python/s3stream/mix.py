"""Mix: several datasets read as one stream, by weight (docs/epoch_plan.md, "Mixing").

::

    web = s3stream.ShardDataset("s3://data/web-{000000..000999}.tar")
    code = s3stream.ShardDataset("s3://data/code-{000000..000099}.tar")
    books = s3stream.MapDataset.from_manifest("s3://data/books.jsonl")
    mix = s3stream.Mix([web, code, books], weights=[0.7, 0.2, 0.1], length="longest")
    loader = s3stream.DataLoader(mix, batch_size=64, num_workers=8)

An epoch of the mix is one global sequence (the same whatever the world size and number of workers)
of ``len`` draws: ``counts[s]`` from source ``s`` (largest remainder of the weights, mix_plan.py),
spread evenly by the native ``MixSchedule``. Each source is read as an endless stream of its own
epochs, each exactly once, in the source's own order; the mix's epoch ``e`` takes the next
``counts[s]`` samples of that stream. Ranks, workers, the epoch and resume are the datasets' own
machinery (planned_iterable.py): ``RankSplit`` passes (resume.py), batches dealt to workers
round-robin, the shared epoch (shared_epoch.py), a worker's own position for torchdata.
"""

from __future__ import annotations

from array import array
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch.utils.data

from . import _core
from .consumers import caller
from .distributed import rank_and_world
from .errors import InternalError, InvalidArgumentError
from .map_dataset import MapDataset
from .mix_plan import Length, apportion, epoch_total, parse_weights, source_sample
from .planned_iterable import PlannedIterable
from .resume import REMAINDERS, SEED_MASK, check_order_options, samples_per_rank, split_for
from .sampler import epoch_permutation
from .shard_dataset import MiB, ShardDataset, default_ahead

_SEED_STEP = 0x9E3779B97F4A7C15  # map sources get seeds of their own: seed + s * step (mod 2^64)
_MIN_AHEAD = 4 * MiB  # per shard source, when several share a worker's read-ahead budget


def _length_of(source: Any) -> int:
    return source.total_samples if isinstance(source, ShardDataset) else len(source)


def _signature(source: Any) -> str:
    """What fixes a source's sequences: a saved state must come from the same."""
    if isinstance(source, ShardDataset):
        return (f"ShardDataset {source.fingerprint()} seed={source.seed} shuffle={source.shuffle} "
                f"sequence={source.interleave}/{source.chunk_bytes}/{source.shuffle_chunks}")
    return f"MapDataset {source.fingerprint()}"


class Mix(PlannedIterable):
    """Several ShardDatasets and MapDatasets read as one dataset, each in proportion to its weight.

    Args:
        sources: the datasets (:class:`ShardDataset` and :class:`MapDataset`, in any combination).
            A ShardDataset keeps its own ``shuffle``, ``seed``, chunking and ``transform``; a
            MapDataset its ``transform``. Their own epoch, rank and batch settings are not used: the
            mix has its own.
        weights: one number >= 0 per source (0 leaves a source out); only their ratios matter. None:
            proportional to the sources' lengths (every source once per epoch).
        length: samples in an epoch of the mix (docs/epoch_plan.md, "Mixing").
            ``"longest"``: the fewest samples in which every source, at its weight, is read at least
            once whole; the smaller ones are upsampled (they repeat, each repeat a new epoch of that
            source in a new order). ``"shortest"``: stop when the first source, at its weight, would
            be exhausted; the others are downsampled, and the next epoch of the mix continues them
            where this one stopped (every sample is seen before any repeats). An int: exactly that many.
        shuffle, seed: the order of MapDataset sources (a seeded permutation per source epoch; source
            ``s`` uses ``seed + s * 0x9E3779B97F4A7C15``). ShardDatasets use their own.
        remainder: ``"drop"`` or ``"pad"`` the samples that do not split evenly across ranks.
        batch_size: the DataLoader's batch size (s3stream.DataLoader fills it in; a plain torch
            DataLoader's is read when iteration starts). Batches are dealt to workers in
            DataLoader's round-robin order, so the order does not depend on ``num_workers``.
        rank, world_size: default from torch.distributed, else RANK / WORLD_SIZE, else 0 / 1.
        stripe: consecutive positions a rank takes per turn (default: the largest of the
            ShardDataset sources', about ``chunk_bytes`` of samples; 1 for MapDatasets alone).

    Raises:
        InvalidArgumentError: a source that is not a ShardDataset or MapDataset, weights of the wrong
            length, negative or adding up to 0, a bad length or option.
    """

    _component = "Mix"

    def __init__(
        self,
        sources: Sequence[Any],
        weights: Optional[Sequence[float]] = None,
        *,
        length: Length = "longest",
        shuffle: bool = True,
        seed: int = 0,
        remainder: str = "drop",
        batch_size: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        stripe: Optional[int] = None,
    ) -> None:
        super().__init__()
        if isinstance(sources, (str, bytes, torch.utils.data.Dataset)) or not hasattr(sources, "__iter__"):
            raise InvalidArgumentError(f"Mix takes a list of datasets, got {type(sources).__name__}: "
                                       "Mix([dataset_a, dataset_b], weights=[...])")
        self.sources = list(sources)
        if not self.sources:
            raise InvalidArgumentError("Mix needs at least one dataset, got none")
        for i, source in enumerate(self.sources):
            if not isinstance(source, (ShardDataset, MapDataset)):
                raise InvalidArgumentError(
                    f"sources[{i}] is a {type(source).__name__}; Mix reads s3stream.ShardDataset and "
                    "s3stream.MapDataset sources (their order and resume position are planned natively): "
                    "build that source as one of them")
        if remainder not in REMAINDERS:
            raise InvalidArgumentError(f"remainder must be 'drop' or 'pad', got {remainder!r}")
        for name, value in (("batch_size", 1 if batch_size is None else batch_size),
                            ("stripe", 1 if stripe is None else stripe)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
        check_order_options(shuffle, seed)
        self.lengths = [_length_of(s) for s in self.sources]
        self.weights = parse_weights(weights, self.lengths)
        self.length = length
        self.total = epoch_total(self.lengths, self.weights, length)
        self.counts = apportion(self.total, self.weights)
        self.shuffle, self.seed, self.remainder, self.batch_size = shuffle, seed, remainder, batch_size
        self._rank_arg, self._world_arg = rank, world_size
        if samples_per_rank(self.total, self._world(), remainder) == 0:
            raise InvalidArgumentError(f"the mix's epoch has {self.total} samples, fewer than the {self._world()} "
                                       "ranks: with remainder='drop' every rank would get none; use remainder='pad'")
        shard_stripes = [s._stripe for s in self.sources if isinstance(s, ShardDataset)]
        self._stripe = stripe if stripe is not None else max(shard_stripes + [1])
        self._init_position()
        self._schedule: Any = None  # the native MixSchedule, made in each process (not picklable)
        self._orders: Dict[int, Tuple[int, Any]] = {}  # MapDataset source -> (its epoch, its permutation)

    def adopt_batch_size(self, batch_size: Optional[int]) -> None:
        """Called by s3stream.DataLoader with its batch size: batches are the unit dealt to workers."""
        if batch_size is not None and self.batch_size is None:
            self.batch_size = int(batch_size)

    def _total(self) -> int:
        return self.total

    def _native_schedule(self) -> Any:
        if self._schedule is None:
            self._schedule = _core.MixSchedule.make(self.counts)
        return self._schedule

    def order(self, epoch: Optional[int] = None, *, rank: Optional[int] = None,
              world_size: Optional[int] = None) -> List[Tuple[int, int, int]]:
        """The rank's whole order for ``epoch`` (default: the current one) as ``(source, source
        epoch, position in that source epoch's sequence)`` triples, without reading any data (for
        inspection and tests)."""
        my_rank, world = rank_and_world(self._rank_arg, self._world_arg)
        world = world if world_size is None else world_size
        epoch = self.epoch if epoch is None else epoch
        split = split_for([(world, self._stripe, self.remainder, 0)], self.total)
        positions = split.rank_positions(my_rank if rank is None else rank)
        sources, draws = (memoryview(b).cast("Q") for b in self._native_schedule().locate(positions))
        return [(s, *source_sample(epoch, self.counts[s], self.lengths[s], d)) for s, d in zip(sources, draws)]

    # -- iteration --------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        # A generator: its body runs at the first next(), where DataLoader's fetcher names the batch size.
        pass_ = self._start_pass(caller())
        if pass_.idle:
            return
        split = split_for(pass_.passes, self.total)
        start, last, batch = pass_.passes[-1][3], split.per_rank - 1, pass_.batch
        if start > last:  # nothing left of the epoch
            self._shared.advance(pass_.epoch)
        # Batch j of the pass (batch positions from `start` on) goes to worker j mod num_workers, the
        # order in which DataLoader collects them: the loop sees the rank's order whatever the count.
        batches = [(lo, min(lo + batch, split.per_rank))
                   for lo in range(start + pass_.worker * batch, split.per_rank, pass_.num_workers * batch)]
        skip = pass_.skip  # samples of its own a worker restored by torchdata had delivered
        while batches and skip:
            lo, hi = batches[0]
            batches[0:1] = [(lo + skip, hi)] if skip < hi - lo else []
            skip = max(0, skip - (hi - lo))
        rank_positions = memoryview(split.rank_positions(pass_.rank)).cast("Q")
        wanted = array("Q", (rank_positions[i] for lo, hi in batches for i in range(lo, hi)))
        sources, draws = (memoryview(b).cast("Q") for b in self._native_schedule().locate(wanted))
        draws_of = [source_sample(pass_.epoch, self.counts[s], self.lengths[s], d) for s, d in zip(sources, draws)]
        samples = self._samples(pass_.epoch, last, batches, sources, draws_of, pass_.num_workers)
        yield from self._laid_out(samples, pass_)

    def _samples(self, epoch: int, last: int, batches: List[Tuple[int, int]], sources: Sequence[int],
                 draws: List[Tuple[int, int]], num_workers: int) -> Iterator[Any]:
        shard_sources = sorted({s for s in sources if isinstance(self.sources[s], ShardDataset)})
        streams = {s: _ShardStream(self.sources[s], [d for t, d in zip(sources, draws) if t == s],
                                   self._iter_batch or 1, self._ahead(self.sources[s], num_workers,
                                                                      len(shard_sources)))
                   for s in shard_sources}
        k = 0  # into sources/draws
        for lo, hi in batches:
            out: List[Any] = [None] * (hi - lo)
            by_map_source: Dict[int, List[int]] = {}
            for slot in range(hi - lo):
                s = sources[k + slot]
                if s in streams:
                    out[slot] = streams[s].next(s, lo + slot)
                else:
                    by_map_source.setdefault(s, []).append(slot)
            for s, slots in by_map_source.items():
                # One concurrent get_many per source and batch (MapDataset.__getitems__).
                indices = [self._map_index(s, *draws[k + slot]) for slot in slots]
                for slot, sample in zip(slots, self.sources[s].__getitems__(indices)):
                    out[slot] = sample
            k += hi - lo
            for slot, sample in enumerate(out):
                if lo + slot == last:
                    self._shared.advance(epoch)  # before the yield: the consumer may never ask again
                self._yielded += 1
                yield sample

    def _map_index(self, s: int, source_epoch: int, position: int) -> int:
        if not self.shuffle:
            return position
        cached = self._orders
        if cached.get(s, (None,))[0] != source_epoch:  # one source epoch's order kept per source
            seed = (self.seed + s * _SEED_STEP) & SEED_MASK
            cached[s] = (source_epoch, epoch_permutation(self.lengths[s], seed, source_epoch))
        return int(cached[s][1][position])

    @staticmethod
    def _ahead(source: ShardDataset, num_workers: int, shard_sources: int) -> int:
        if source.max_bytes_ahead is not None:
            return source.max_bytes_ahead
        return max(_MIN_AHEAD, default_ahead(num_workers) // shard_sources)

    # -- resume -----------------------------------------------------------------------------------------
    def _identity(self) -> Dict[str, Any]:
        # What fixes the epoch's global sequence; counts first: they name a mix of other sizes or weights.
        mine: Dict[str, Any] = {"counts": list(self.counts), "seed": self.seed, "shuffle": self.shuffle}
        mine.update({f"source{i}": _signature(s) for i, s in enumerate(self.sources)})
        return mine

    # -- pickling (spawn workers): no native handles ----------------------------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_schedule"] = None
        state["_orders"] = {}
        return state

    def __repr__(self) -> str:
        parts = ", ".join(f"{type(s).__name__}: {c}" for s, c in zip(self.sources, self.counts))
        return f"s3stream.Mix({self.total} samples per epoch ({parts}), length={self.length!r}, epoch={self.epoch})"


class _ShardStream:
    """One ShardDataset source's draws for one worker's pass, read in order: one native reader per
    run of increasing positions within one source epoch (a new run at each new source epoch, or where
    pad wraps to the start), made when the previous run is used up, so one reads ahead at a time."""

    def __init__(self, source: ShardDataset, draws: List[Tuple[int, int]], batch: int, ahead: int) -> None:
        self._source, self._batch, self._ahead = source, batch, ahead
        self._runs: List[Tuple[int, List[int]]] = []  # (source epoch, ascending positions)
        for source_epoch, position in draws:
            if not self._runs or self._runs[-1][0] != source_epoch or self._runs[-1][1][-1] >= position:
                self._runs.append((source_epoch, []))
            self._runs[-1][1].append(position)
        self._runs.reverse()  # popped from the end
        self._reader: Any = None

    def next(self, s: int, index: int) -> Any:
        sample = self._reader.next() if self._reader is not None else None
        if sample is None:
            if not self._runs:
                raise InternalError(f"Mix: source {s} ran out of samples before the pass's end; please report it")
            self._reader = self._open(*self._runs.pop())
            sample = self._reader.next()
        sample["__index__"], sample["__source__"] = index, s
        transform = self._source.transform
        return transform(sample) if transform is not None else sample

    def _open(self, source_epoch: int, positions: List[int]) -> Any:
        ds = self._source
        o = _core.PlanOptions()
        o.seed, o.epoch, o.shuffle = ds.seed & SEED_MASK, source_epoch, ds.shuffle
        o.world_size, o.rank, o.remainder = 1, 0, _core.Remainder.drop  # one reader takes every position given
        o.batch_size, o.stripe = self._batch, len(positions)
        o.interleave, o.chunk_bytes, o.shuffle_chunks = ds.interleave, ds.chunk_bytes, ds.shuffle_chunks
        ranges: List[Tuple[int, int]] = []
        for p in positions:  # consecutive positions as one range: the reader coalesces their bytes
            if ranges and ranges[-1][1] == p:
                ranges[-1] = (ranges[-1][0], p + 1)
            else:
                ranges.append((p, p + 1))
        shards = ds._native_shards()
        plan = _core.EpochPlan.make(shards, o, ranges)
        return _core.ShardReader(shards, plan, 0, 1, 0, self._ahead, ds.piece_size)


__all__ = ["Mix"]
