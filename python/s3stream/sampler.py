"""EpochSampler: the epoch plan for map-style datasets.

Which samples this rank reads in an epoch, and in which order, is a pure function of
``(dataset size, seed, epoch, world size, rank, shuffle, remainder)``:

1. The epoch's order: with ``shuffle`` a Fisher-Yates permutation of ``range(N)`` seeded by
   ``(seed, epoch)`` with the native plan's own generator (not torch's or numpy's), so the same
   seed gives the same order with any library version, on any machine, in every run; else
   ``range(N)``.
2. Rank ``r`` takes positions ``[r * L, (r + 1) * L)`` of that order. With ``remainder="drop"``,
   ``L = N // world_size`` and the ``N % world_size`` samples at the end of the order are left out
   (different ones every epoch, since the order changes); with ``"pad"``, ``L = ceil(N / world_size)``
   and the positions past the end wrap around to the start of the order. Either way every rank has
   exactly ``L`` samples, so DDP never waits on a rank that ran out.
3. The sampler runs in the main process (DataLoader workers only receive indices), so the number of
   workers does not change the order, and a resumed epoch continues exactly where it stopped even
   with a different ``num_workers``.

Resume: :meth:`EpochSampler.state_dict` / :meth:`EpochSampler.load_state_dict`. A DataLoader fetches
indices ahead of the training loop (``prefetch_factor * num_workers`` batches), so what the sampler
has yielded overcounts what the loop received: pass ``consumed=`` (the samples the loop received in
the current epoch), or use :class:`s3stream.DataLoader`, which counts them and passes them for you.
"""

from __future__ import annotations

import operator
from typing import Any, Dict, Iterator, List, Optional, Sequence, Sized, Tuple, Union

import torch.utils.data

from . import _core
from .distributed import rank_and_world
from .errors import InvalidArgumentError
from .resume import (PLAN_VERSION, SEED_MASK, Pass, check_order_options, check_state, continue_passes,
                     samples_per_rank, split_for)

_ITER_CHUNK = 8192  # indices converted to Python ints at a time (keeps iteration memory small)


def epoch_permutation(n: int, seed: int, epoch: int) -> Sequence[int]:
    """The shuffled order of ``range(n)`` for ``(seed, epoch)``: a pure function of its arguments,
    computed natively with the shard plan's generator (src/pipeline/epoch_plan.cc)."""
    return memoryview(_core.epoch_permutation(n, seed & SEED_MASK, epoch & SEED_MASK)).cast("Q")


class EpochSampler(torch.utils.data.Sampler[int]):
    """Indices of a map-style dataset for this rank, every sample exactly once per epoch across all
    ranks (see the module docstring for the plan).

    Args:
        dataset_or_length: the dataset (anything with ``len()``), or its length. When the dataset
            has a ``fingerprint()`` (:class:`s3stream.MapDataset` does), resumed states are checked
            against it too.
        shuffle: a new seeded order every epoch (call :meth:`set_epoch`, or use
            :class:`s3stream.DataLoader`, which advances the epoch by itself).
        seed: the same seed gives the same order in every run.
        rank, world_size: default from torch.distributed when initialised, else ``RANK`` /
            ``WORLD_SIZE``, else 0 / 1 (resolved here, at construction).
        remainder: ``"drop"`` or ``"pad"`` the samples that do not split evenly across ranks.

    Raises:
        InvalidArgumentError: an empty dataset, a bad option, a rank outside the world, or
            ``remainder="drop"`` with fewer samples than ranks.
    """

    def __init__(
        self,
        dataset_or_length: Union[Sized, int],
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        remainder: str = "drop",
    ) -> None:
        super().__init__()
        if isinstance(dataset_or_length, bool):
            raise InvalidArgumentError(f"EpochSampler needs a dataset or its length, got {dataset_or_length!r}")
        fingerprint = None
        try:
            n = operator.index(dataset_or_length)  # an int, a numpy integer, a 0-d integer tensor
        except TypeError:
            try:
                n = len(dataset_or_length)
            except TypeError:
                raise InvalidArgumentError(
                    f"EpochSampler needs a dataset with len() or its length, got {type(dataset_or_length).__name__}"
                ) from None
            fp = getattr(dataset_or_length, "fingerprint", None)
            fingerprint = fp() if callable(fp) else None
        if n < 1:
            raise InvalidArgumentError(f"EpochSampler needs at least one sample, the dataset has {n}")
        check_order_options(shuffle, seed)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.dataset_size = n
        self.shuffle = shuffle
        self.seed = seed
        self.remainder = remainder
        self.fingerprint = fingerprint
        self.samples_per_rank = samples_per_rank(n, self.world_size, remainder)
        if self.samples_per_rank == 0:
            raise InvalidArgumentError(
                f"the dataset has {n} samples, fewer than the {self.world_size} ranks: with remainder='drop' "
                "every rank would get none; use remainder='pad'"
            )
        self._epoch = 0
        self._resume: Optional[Tuple[int, List[Pass]]] = None  # (epoch, passes): where that epoch continues
        self._pass: Optional[Tuple[int, List[Pass]]] = None  # the latest __iter__ pass ...
        self._pass_yielded = 0  # ... and how many indices it has yielded so far
        self._completed_epoch: Optional[int] = None
        self.auto_epoch = True

    # -- epochs and positions --------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch whose order the next iteration follows. A position restored by
        :meth:`load_state_dict` applies only while the epoch is the restored one."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgumentError(f"epoch must be a non-negative integer, got {epoch!r}")
        self._epoch = epoch
        self._completed_epoch = None

    def _passes(self, epoch: int) -> List[Pass]:
        if self._resume is not None and self._resume[0] == epoch:
            return self._resume[1]
        return self._fresh()

    def _fresh(self) -> List[Pass]:
        return [(self.world_size, 1, self.remainder, 0)]

    def _split(self, passes: List[Pass]) -> Any:
        return split_for(passes, self.dataset_size)

    def indices(self, epoch: Optional[int] = None) -> List[int]:
        """This rank's whole order for ``epoch`` (default: the current one), from its start."""
        return [int(i) for i in self._rank_order(self._epoch if epoch is None else epoch, self._fresh())]

    def _rank_order(self, epoch: int, passes: List[Pass]) -> Sequence[int]:
        # Ranks take turns of one position of the epoch's permutation (a stripe of 1, as
        # DistributedSampler deals), of what the pass has left to read.
        order = epoch_permutation(self.dataset_size, self.seed, epoch) if self.shuffle else range(self.dataset_size)
        positions = memoryview(self._split(passes).rank_positions(self.rank)).cast("Q")
        return _Mapped(order, positions)

    def __len__(self) -> int:
        """Indices the next pass over the current epoch yields (fewer when resuming mid-epoch)."""
        passes = self._passes(self._epoch)
        return self._split(passes).per_rank - passes[-1][3]

    def pass_length(self) -> int:
        """Samples the next pass delivers (s3stream.DataLoader: the pass is complete after them)."""
        return len(self)

    def __iter__(self) -> Iterator[int]:
        if self.auto_epoch and self._completed_epoch == self._epoch:
            # The previous pass over this epoch ran to its end and nobody chose an epoch since
            # (torchdata's StatefulDataLoader and a plain loop never call set_epoch): the next one.
            self._epoch += 1
        epoch = self._epoch
        passes = self._passes(epoch)
        start = passes[-1][3]
        order = self._rank_order(epoch, passes)
        self._pass, self._pass_yielded = (epoch, passes), 0
        for lo in range(start, len(order), _ITER_CHUNK):
            for i in order.slice(lo, lo + _ITER_CHUNK):
                self._pass_yielded += 1
                yield i
        self._completed_epoch = epoch

    # -- resume ------------------------------------------------------------------------------------------
    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """Where the current epoch stands.

        Args:
            consumed: how many samples of the current epoch's iteration the training loop has
                received (:class:`s3stream.DataLoader` passes it). By default, the indices this
                sampler has yielded in that iteration, which is exact only without prefetching
                (``num_workers=0``): with workers, DataLoader fetches indices ahead of the loop.

        Returns:
            ``{"plan", "epoch", "passes", "consumed", "seed", "shuffle", "num_samples", "world_size",
            "remainder", "fingerprint"}``; ``consumed`` counts from the epoch's start (it includes a
            restored position), ``num_samples`` is the dataset's size, ``passes`` the epoch's passes
            (resume.py), enough to resume at any world size.
        """
        epoch = self._epoch
        if self._pass is not None and self._pass[0] == epoch:
            passes = self._pass[1]
            done = self._pass_yielded if consumed is None else consumed
        else:
            passes, done = self._passes(epoch), 0 if consumed is None else consumed
        if isinstance(done, bool) or not isinstance(done, int) or done < 0:
            raise InvalidArgumentError(f"consumed must be a non-negative integer, got {consumed!r}")
        *last, start = passes[-1]
        position = start + done
        per_rank = self._split(passes).per_rank
        if position > per_rank:
            raise InvalidArgumentError(
                f"consumed={consumed} goes past the end of the epoch: this rank has {per_rank} "
                f"samples in this pass and the iteration started at {start}"
            )
        return {
            "plan": PLAN_VERSION,
            "epoch": epoch,
            "passes": [list(p) for p in passes[:-1]] + [[*last, position]],
            "consumed": position,
            "world_size": self.world_size,
            "remainder": self.remainder,
            **self._identity(),
        }

    def _identity(self) -> Dict[str, Any]:
        return {"seed": self.seed, "shuffle": self.shuffle, "num_samples": self.dataset_size,
                "fingerprint": self.fingerprint}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues the saved epoch after its ``consumed`` samples: the next iteration yields
        exactly the indices the saved run had not delivered, whatever the number of DataLoader
        workers and ranks now (a state saved on any one rank serves every rank: elastic resume).

        Raises:
            InvalidArgumentError: the state is not an EpochSampler state, or it comes from another
                dataset, seed or shuffle.
        """
        epoch, passes = check_state(state, self._identity(), component="EpochSampler", total=self.dataset_size)
        passes = continue_passes(passes, self.world_size, 1, self.remainder)
        if passes[-1][3] >= self._split(passes).per_rank:
            self._epoch, self._resume = epoch + 1, None  # the saved epoch is complete
        else:
            self._epoch, self._resume = epoch, (epoch, passes)
        self._pass, self._pass_yielded = None, 0
        self._completed_epoch = None

    def __repr__(self) -> str:
        return (
            f"s3stream.EpochSampler({self.dataset_size:,} samples, rank {self.rank}/{self.world_size}, "
            f"{self.samples_per_rank:,} per rank, shuffle={self.shuffle}, seed={self.seed}, "
            f"remainder={self.remainder!r}, epoch={self._epoch})"
        )


class _Mapped:
    """``order[positions[i]]`` without building the list: a rank's indices, read in slices."""

    def __init__(self, order: Sequence[int], positions: Sequence[int]) -> None:
        self._order, self._positions = order, positions

    def __len__(self) -> int:
        return len(self._positions)

    def __iter__(self) -> Iterator[int]:
        return self.slice(0, len(self))

    def slice(self, lo: int, hi: int) -> Iterator[int]:
        order = self._order
        return (int(order[p]) for p in self._positions[lo:hi].tolist())


__all__ = ["EpochSampler", "epoch_permutation"]
