"""s3stream.DataLoader: torch's DataLoader that knows how far the training loop really got.

A ``torch.utils.data.DataLoader`` fetches indices and batches ahead of the loop
(``prefetch_factor * num_workers`` batches), so neither the sampler nor the dataset can tell how
many samples the loop has actually received. This subclass counts them as it hands batches over,
which makes ``state_dict()`` exact: a resumed run neither replays nor skips a sample, whatever
``num_workers`` was or is. It also advances the epoch by itself between complete passes, so a new
order every epoch needs no ``set_epoch`` call (calling it yourself still works).

::

    loader = s3stream.DataLoader(ds, batch_size=64, sampler=s3stream.EpochSampler(ds), num_workers=8)
    for batch in loader:
        ...
        if step % 1000 == 0:
            torch.save({"model": model.state_dict(), "loader": loader.state_dict()}, f)
    # later, maybe with another num_workers:
    loader.load_state_dict(checkpoint["loader"])
    for batch in loader:   # continues the saved epoch where it stopped
        ...

The resumable-component protocol
--------------------------------
The loader checkpoints its ``sampler``, ``batch_sampler`` and ``dataset``, each of which takes part
when it has both of:

* ``state_dict(consumed: int | None = None) -> dict``: where the current epoch stands, given that the
  training loop has received ``consumed`` samples of the current iteration (counted from where the
  iteration started: a component adds the position it resumed from). ``None`` means "use your own
  count", which is only right without prefetching.
* ``load_state_dict(state: dict) -> None``: the next iteration continues after the saved position.

and, optionally, ``set_epoch(epoch)`` with an ``epoch`` attribute, which the loader uses to advance
the epoch. :class:`s3stream.EpochSampler` and :class:`s3stream.ShardDataset` implement it. A dataset
with ``adopt_batch_size(batch_size)`` is told the loader's batch size at construction.

How samples are counted: for a map-style dataset exactly, from the index batches the loader sends
to its fetchers (the k-th batch delivered is the k-th sent, with in-order delivery), whatever the
collate function returns. For an iterable dataset, from the batch itself: the leading dimension of
its first tensor, the length of its columns, or ``len()`` of a list (see ``_leading_len``).

The loader's own state::

    {"version": 1,
     "epoch_complete": bool,   # the last iteration ran to its end: the next one starts a new epoch
     "delivered": int,         # samples the loop received in the current iteration
     "sampler": {...},         # component states, for each component that takes part
     "batch_sampler": {...},
     "dataset": {...}}
"""

from __future__ import annotations

import collections
import inspect
from typing import Any, Callable, Deque, Dict, Iterator, List, Mapping, Optional, Tuple

import torch
import torch.utils.data

from .errors import InvalidArgumentError
from .transfer import PackingCollate, worker_started

STATE_VERSION = 1
_COMPONENTS = ("sampler", "batch_sampler", "dataset")


def _takes_consumed(method: Any) -> bool:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return "consumed" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def is_resumable(obj: Any) -> bool:
    """Whether ``obj`` follows the resumable-component protocol (see the module docstring)."""
    return (
        obj is not None
        and callable(getattr(obj, "load_state_dict", None))
        and callable(getattr(obj, "state_dict", None))
        and _takes_consumed(obj.state_dict)
    )


def _leading_len(x: Any) -> Optional[int]:
    """Samples in a collated batch, guessed from its structure (used for iterable datasets only)."""
    if isinstance(x, torch.Tensor):
        return int(x.shape[0]) if x.dim() > 0 else None
    if isinstance(x, Mapping):  # default_collate turns a batch of dicts into a dict of columns
        for value in x.values():
            n = _leading_len(value)
            if n is not None:
                return n
        return None
    if isinstance(x, (list, tuple)):
        # default_collate turns a batch of tuples into a list of columns: if every element is a
        # column (a tensor or list) of one common length, that length is the batch's size.
        lengths = set()
        for el in x:
            if isinstance(el, torch.Tensor) and el.dim() > 0:
                lengths.add(int(el.shape[0]))
            elif isinstance(el, list):
                lengths.add(len(el))
            else:
                lengths = set()
                break
        if len(lengths) == 1 and len(x) > 0:
            return lengths.pop()
        return len(x)
    return None


class _Pass:
    """Bookkeeping for one iteration over the loader."""

    __slots__ = ("sizes", "delivered", "complete", "epochs", "expected")

    def __init__(self, epochs: Dict[str, Any], expected: Optional[int] = None) -> None:
        # Sizes of the index batches handed to the fetchers and not yet delivered, in order: with
        # in-order delivery (DataLoader's default) the k-th batch delivered is the k-th one sent.
        self.sizes: Deque[int] = collections.deque()
        self.delivered = 0
        self.complete = False
        self.epochs = epochs  # each component's epoch when the iteration began
        # Samples the pass delivers in all, when a component says (pass_length()): frameworks stop
        # after len(loader) batches without asking for the end, and the pass is complete then too.
        self.expected = expected


class _Tracker:
    """The loader's current pass, shared with its index sampler wrapper. A separate object, not the
    loader itself: DataLoader's (persistent) iterator keeps the wrapper, and a wrapper pointing back
    at the loader would make a reference cycle, which leaves the workers to be shut down by the
    garbage collector, slowly (torch then waits seconds per worker), instead of at once."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current: Optional[_Pass] = None


class _RecordingIndexSampler:
    """Stands in for the loader's index sampler: passes batches of indices through unchanged and
    notes each one's size, so the loader knows exactly how many samples each delivered batch holds
    (whatever the collate function makes of them)."""

    def __init__(self, inner: Any, tracker: _Tracker, batched: bool) -> None:
        self._inner = inner
        self._tracker = tracker
        self._batched = batched

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> Iterator[Any]:
        # The pass is taken now, not when the generator first runs: DataLoader may call iter()
        # twice for one iteration and only use the second.
        return self._generate(self._tracker.current)

    def _generate(self, record: Optional[_Pass]) -> Iterator[Any]:
        sizes = record.sizes if record is not None else None
        for item in self._inner:
            if sizes is not None:
                sizes.append(len(item) if self._batched else 1)
            yield item


class _BatchLen:
    """Samples in a delivered batch when no index batch was recorded for it (iterable datasets)."""

    def __init__(self, auto_collation: bool, batch_size: Optional[int]) -> None:
        self.auto_collation = auto_collation
        self.batch_size = batch_size

    def __call__(self, batch: Any) -> int:
        if not self.auto_collation:
            return 1  # batch_size=None: every item is one sample
        n = _leading_len(batch)
        return n if n is not None else int(self.batch_size or 1)


class _CountingIterator:
    """Wraps DataLoader's iterator; counts the samples of each batch as the loop receives it.

    The iteration begins (its epoch is chosen, torch's iterator made, workers start reading) at the
    first batch asked for, not at iter(): Lightning makes the iterator of a resumed run's first
    epoch and only then calls ``set_epoch`` on the loader's sampler, which must still choose the
    epoch that iteration reads."""

    def __init__(self, begin: Callable[[], Tuple[Any, _Pass]], infer_batch_len: Any) -> None:
        self._begin: Optional[Callable[[], Tuple[Any, _Pass]]] = begin
        self._it: Any = None
        self._record: Optional[_Pass] = None
        self._infer_batch_len = infer_batch_len

    def _started(self) -> Any:
        if self._begin is not None:
            self._it, self._record = self._begin()
            self._begin = None  # holds the loader: not past the start
        return self._it

    def __iter__(self) -> "_CountingIterator":
        return self

    def __len__(self) -> int:
        return len(self._started())

    def __next__(self) -> Any:
        it = self._started()
        record = self._record
        assert record is not None
        try:
            batch = next(it)
        except StopIteration:
            record.complete = True
            raise
        except Exception:
            # The failed batch's indices were taken from the index stream; the loop has moved past
            # them, so resuming must not fetch them again behind the batches that follow.
            if record.sizes:
                record.delivered += record.sizes.popleft()
            raise
        if record.sizes:
            record.delivered += record.sizes.popleft()
        else:
            record.delivered += self._infer_batch_len(batch)
        if record.expected is not None and record.delivered >= record.expected:
            record.complete = True
        return batch

    def __getattr__(self, name: str) -> Any:  # the rest of DataLoader's iterator, unchanged
        if name in ("_it", "_begin", "_record"):
            raise AttributeError(name)
        return getattr(self._started(), name)


class _DatasetEpoch(torch.utils.data.dataloader._InfiniteConstantSampler):
    """The sampler of an s3stream.DataLoader over an iterable dataset: torch's placeholder (every
    index None), plus ``set_epoch``, passed on to the dataset. Frameworks tell a loader the epoch
    through its sampler only (Lightning calls ``loader.sampler.set_epoch`` every epoch, also the
    first one of a resumed run, whose epoch the dataset cannot know by itself)."""

    def __init__(self, dataset: Any) -> None:
        super().__init__()
        self.dataset = dataset

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)


class _WorkerInit:
    """Sets a worker up for transfer.py, then runs the user's worker_init_fn (picklable: spawn)."""

    def __init__(self, user_fn: Optional[Callable[[int], None]]) -> None:
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        worker_started()
        if self.user_fn is not None:
            self.user_fn(worker_id)


class DataLoader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader`` plus exact ``state_dict()`` / ``load_state_dict()`` and
    automatic epochs. Takes every argument torch's DataLoader takes, and:

    Args:
        advance_epoch: after an iteration that ran to its end, the next one calls ``set_epoch(epoch
            + 1)`` on the sampler, batch sampler and dataset (those that have it), unless their epoch
            was changed in between: calling ``set_epoch(e)`` yourself every epoch, as with
            DistributedSampler, gives epochs ``e`` exactly. To iterate the same epoch again on
            purpose, pass ``advance_epoch=False``. An iteration left early (``break``) does not
            advance: the next one repeats the epoch. Default True.

    Batches must be delivered in order (``in_order=True``, torch's default) for the state to be a
    position in the epoch.
    """

    def __init__(self, *args: Any, advance_epoch: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.num_workers > 0:
            # Buffers in a batch cross from the workers by reference into shared memory (transfer.py).
            self.collate_fn = PackingCollate(self.collate_fn)
            self.worker_init_fn = _WorkerInit(self.worker_init_fn)
        if self._dataset_kind == torch.utils.data.dataloader._DatasetKind.Iterable and \
                callable(getattr(self.dataset, "set_epoch", None)) and \
                type(self.sampler) is torch.utils.data.dataloader._InfiniteConstantSampler:
            # torch refuses a sampler for an iterable dataset, and a set attribute after __init__:
            # the same placeholder, with the epoch hook frameworks call.
            object.__setattr__(self, "sampler", _DatasetEpoch(self.dataset))
        self._s3s_advance_epoch = bool(advance_epoch)
        self._s3s_tracker = _Tracker()
        # A dataset that plans in batches (s3stream.ShardDataset deals whole batches to workers, so
        # the order does not depend on num_workers) learns the batch size here, before any worker.
        adopt = getattr(self.dataset, "adopt_batch_size", None)
        if callable(adopt):
            adopt(self.batch_size)
        for _, obj in self._components():
            if hasattr(obj, "auto_epoch"):
                # This loader knows what the loop received: it advances the epoch after a complete
                # pass, and an iteration left early repeats its epoch.
                obj.auto_epoch = False

    @property
    def _s3s_pass(self) -> Optional[_Pass]:
        return self._s3s_tracker.current

    @_s3s_pass.setter
    def _s3s_pass(self, record: Optional[_Pass]) -> None:
        self._s3s_tracker.current = record

    # -- components ----------------------------------------------------------------------------------
    def _components(self) -> List[Tuple[str, Any]]:
        seen = set()
        out = []
        for name in _COMPONENTS:
            obj = getattr(self, name, None)
            if obj is None or id(obj) in seen or isinstance(obj, _DatasetEpoch):  # the dataset's own hook
                continue
            seen.add(id(obj))
            out.append((name, obj))
        return out

    def _resumables(self) -> List[Tuple[str, Any]]:
        return [(name, obj) for name, obj in self._components() if is_resumable(obj)]

    def _epochs(self) -> Dict[str, Any]:
        out = {}
        for name, obj in self._components():
            if callable(getattr(obj, "set_epoch", None)) and isinstance(getattr(obj, "epoch", None), int):
                out[name] = obj.epoch
        return out

    def set_epoch(self, epoch: int) -> None:
        """Calls ``set_epoch(epoch)`` on the sampler, batch sampler and dataset that have it."""
        for _, obj in self._components():
            if callable(getattr(obj, "set_epoch", None)):
                obj.set_epoch(epoch)

    def _pass_length(self) -> Optional[int]:
        for _, obj in self._components():
            length = getattr(obj, "pass_length", None)
            if callable(length):
                return int(length())
        return None

    # -- iteration -----------------------------------------------------------------------------------
    @property
    def _index_sampler(self) -> Any:  # overrides torch's: what the iterator draws index batches from
        inner = super()._index_sampler
        if self._dataset_kind != torch.utils.data.dataloader._DatasetKind.Map:
            return inner  # iterable datasets: indices are placeholders; sizes come from the batches
        return _RecordingIndexSampler(inner, self._s3s_tracker, batched=self._auto_collation)

    def __iter__(self) -> _CountingIterator:  # type: ignore[override]
        return _CountingIterator(self._begin_pass, _BatchLen(self._auto_collation, self.batch_size))

    def _begin_pass(self) -> Tuple[Any, _Pass]:
        """Starts an iteration (at its first batch): advances the epoch after a complete pass, and
        makes torch's iterator."""
        previous = self._s3s_pass
        if self._s3s_advance_epoch and previous is not None and previous.complete:
            now = self._epochs()
            for name, obj in self._components():
                if name in now and name in previous.epochs and now[name] == previous.epochs[name]:
                    obj.set_epoch(now[name] + 1)
        record = _Pass(self._epochs(), expected=self._pass_length())
        self._s3s_pass = record  # before super().__iter__(), which starts fetching indices
        return super().__iter__(), record

    # -- resume --------------------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """The position of the training loop in the current epoch, for :meth:`load_state_dict`.

        Call it between batches (or epochs) of the loop. See the module docstring for the format.

        Raises:
            InvalidArgumentError: no component takes part (use :class:`s3stream.EpochSampler` as
                the sampler), or batches are delivered out of order (``in_order=False``).
        """
        if not getattr(self, "in_order", True) and self.num_workers > 0:
            raise InvalidArgumentError(
                "state_dict() needs batches in order: with in_order=False the batches delivered are not a "
                "prefix of the epoch, so no position describes them"
            )
        components = self._resumables()
        if not components:
            raise InvalidArgumentError(
                "nothing to checkpoint: neither the sampler nor the dataset is resumable; for a map-style "
                "dataset pass sampler=s3stream.EpochSampler(dataset)"
            )
        record = self._s3s_pass
        if record is None or record.epochs != self._epochs():
            # No iteration since construction or load_state_dict, or a new epoch was selected since
            # the last one began: nothing of the current epoch has been consumed yet.
            consumed, complete = 0, False
        else:
            consumed, complete = record.delivered, record.complete
        state: Dict[str, Any] = {"version": STATE_VERSION, "epoch_complete": complete, "delivered": consumed}
        for name, obj in components:
            state[name] = obj.state_dict(consumed=consumed)
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`: the next iteration continues the saved epoch after the
        samples the saved run's loop received (or, if that epoch was complete, starts the next
        one). Call it before iterating. The number of workers may differ from the saved run's.

        Raises:
            InvalidArgumentError: not a loader state, or its components do not match this loader's.
        """
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise InvalidArgumentError(
                f"not an s3stream.DataLoader state (version {STATE_VERSION} expected): {state!r:.200}"
            )
        components = self._resumables()
        names = {name for name, _ in components}
        saved = {name for name in _COMPONENTS if name in state}
        if names != saved:
            raise InvalidArgumentError(
                f"cannot resume: the saved state holds {sorted(saved)} but this loader's resumable parts are "
                f"{sorted(names)} (build the loader the same way as the saved one)"
            )
        for name, obj in components:
            obj.load_state_dict(state[name])
        # A component whose saved position is the end of its epoch continues with the next epoch by
        # itself: nothing to advance here.
        self._s3s_pass = None


__all__ = ["DataLoader", "is_resumable"]
