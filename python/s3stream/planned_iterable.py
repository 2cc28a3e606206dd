"""What ShardDataset and Mix share: an iterable dataset whose epoch is one global sequence of
positions, split between ranks by passes (resume.py), dealt to DataLoader workers a batch at a time.

Here live the position (``state_dict`` / ``load_state_dict``: the rank's, or inside a DataLoader
worker the worker's own, which torchdata's StatefulDataLoader saves and restores per worker) and
the start of each pass: who is iterating (consumers.py: the batch size, Accelerate's wrappers), which
epoch and passes it reads, and how many of its own samples a restored worker skips. Subclasses say
how many positions an epoch has, what fixes its sequence, and read the positions.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch.utils.data

from .consumers import (Consumer, caller, detect, forward_state, shard_layout, under_accelerate_dispatch,
                        wrapped_by_shard)
from .distributed import rank_and_world, worker_and_count
from .errors import InvalidArgumentError
from .resume import PLAN_VERSION, Pass, check_state, continue_passes, samples_per_rank, split_for
from .shared_epoch import SharedEpoch, SharedEpochMixin
from .transfer import adopt_worker

Position = Tuple[int, List[Pass], int]  # (epoch, passes, samples of its own share a worker skips)


@dataclass(frozen=True)
class PassStart:
    """What one iteration reads: this rank of ``world`` (rank 0 of 1 where Accelerate's dispatcher
    reads for every process), ``batch``-sample batches dealt round-robin to ``num_workers``, from
    position ``passes[-1][3]`` of ``epoch`` on, less the first ``skip`` of this worker's own."""

    consumer: Consumer
    rank: int
    world: int
    batch: int
    epoch: int
    passes: List[Pass]
    skip: int
    worker: int
    num_workers: int
    idle: bool = False  # a process that Accelerate's dispatcher never reads from: it reads nothing


def worker_share(samples: int, batch: int, worker: int, num_workers: int) -> int:
    """Of a pass of ``samples`` dealt to ``num_workers`` workers a batch at a time, round-robin, how
    many ``worker`` reads."""
    batches = -(-samples // batch)
    mine = len(range(worker, batches, num_workers))
    if mine and (batches - 1) % num_workers == worker:  # this worker reads the last, short batch
        return (mine - 1) * batch + samples - (batches - 1) * batch
    return mine * batch


_warned: set = set()  # the warnings this process printed


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        print(message, file=sys.stderr)


def _advise_against_dispatch(rank: int, world: int) -> None:
    """One line on process 0 of several: dispatch mode is neither resumable nor parallel."""
    if rank == 0 and world > 1:
        _warn_once("s3stream: Accelerate dispatches batches from process 0 (dispatch_batches, its default for an "
                   "iterable dataset): process 0 reads for every process, and a state saved by accelerator.save_state "
                   "cannot be resumed exactly (every process writes its own loader state to the same file). "
                   "Accelerator(dataloader_config=DataLoaderConfiguration(dispatch_batches=False)) lets each process "
                   "read its own share, resumably")


class PlannedIterable(SharedEpochMixin, torch.utils.data.IterableDataset):
    """Subclasses set ``remainder``, ``batch_size``, ``_rank_arg``, ``_world_arg``, ``_stripe``,
    call :meth:`_init_position` and define ``_total()``, ``_identity()`` and ``_component``."""

    _component = "dataset"
    remainder: str
    batch_size: Optional[int]
    _stripe: int

    def _init_position(self) -> None:
        # set_epoch / load_state_dict reach (persistent) workers through it, and the worker that reads a
        # pass's last sample advances the epoch for the next pass through it.
        self._shared = SharedEpoch()
        self._pass: Optional[Tuple[int, List[Pass]]] = None  # (epoch, passes) of the latest iteration here
        self._yielded = 0  # samples that iteration yielded in this process
        self._worker_resume: Optional[Position] = None  # set in a worker by load_state_dict
        self._worker_skip = 0
        self._resume_batch: Optional[int] = None  # the batch size a worker's restored position counts in
        self._iter_batch: Optional[int] = None  # the batch size the latest iteration dealt to workers
        self._warned_batch = False

    def _total(self) -> int:
        raise NotImplementedError

    def _identity(self) -> Dict[str, Any]:
        raise NotImplementedError

    def _world(self) -> int:
        return rank_and_world(self._rank_arg, self._world_arg)[1]

    def _fresh_pass(self, world: int) -> List[Pass]:
        return [(world, self._stripe, self.remainder, 0)]

    def _peek_pass(self) -> Position:
        """A position restored in this worker by torchdata, else the shared one (load_state_dict in
        the main process), else the current epoch from its start."""
        if self._worker_resume is not None:
            return self._worker_resume
        passes = self._shared.restored()
        return self.epoch, passes if passes is not None else self._fresh_pass(self._world()), 0

    # -- sizes ----------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Samples per rank in a whole epoch (the same on every rank)."""
        per_rank = samples_per_rank(self._total(), self._world(), self.remainder)
        shard = wrapped_by_shard(self, caller())
        if shard is None:
            return per_rank
        # Accelerate's IterableDatasetShard divides len() by the number of processes, taking it for
        # the whole stream's; what it yields here is this rank's share.
        forward_state(shard, self)
        return per_rank * shard.num_processes

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch whose order the next iteration follows (also in persistent workers)."""
        frame = caller()
        shard = wrapped_by_shard(self, frame)
        if shard is not None:  # Accelerate's loader, in the main process, before it starts an iteration
            forward_state(shard, self)
        elif under_accelerate_dispatch(frame):
            _advise_against_dispatch(*rank_and_world(self._rank_arg, self._world_arg))
        super().set_epoch(epoch)

    def pass_length(self) -> int:
        """Samples per rank the next iteration delivers (fewer than ``len()`` after a resume)."""
        _, passes, _ = self._peek_pass()
        return split_for(passes, self._total()).per_rank - passes[-1][3]

    # -- resume -----------------------------------------------------------------------------------------
    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """Where the epoch stands. ``consumed``: samples the training loop received in the current
        iteration (s3stream.DataLoader passes it); by default, what this process yielded itself
        (right for num_workers=0). In a DataLoader worker (torchdata's StatefulDataLoader asks each
        worker), the worker's own position, which load_state_dict restores in the same worker. Any
        other state, saved on any one rank, resumes every rank of a job of any size."""
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
        if torch.utils.data.get_worker_info() is not None:
            # A worker only knows its own samples: its position is its share's, not the rank's.
            worker, num_workers = worker_and_count()
            state["passes"][-1][3] = start
            state["consumed"] = start
            state["worker"] = {"id": worker, "num_workers": num_workers, "batch_size": self._iter_batch,
                               "consumed": self._worker_skip + self._yielded}
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The next iteration continues the saved epoch: nothing is replayed, nothing skipped,
        whatever the number of DataLoader workers and ranks now (elastic resume).

        Raises:
            InvalidArgumentError: not such a state, or one from other data or settings (the message
                names the first field that differs); a worker's own position anywhere but in that
                worker.
        """
        epoch, passes = check_state(state, self._identity(), component=self._component, total=self._total())
        worker_state = state.get("worker")
        if worker_state is not None:
            self._load_worker_state(epoch, passes, worker_state)
            return
        passes = continue_passes(passes, self._world(), self._stripe, self.remainder)
        if passes[-1][3] >= split_for(passes, self._total()).per_rank:
            epoch, passes = epoch + 1, []  # the saved epoch is complete: the next one starts
        if torch.utils.data.get_worker_info() is not None:
            # In a worker (a state loaded there by hand or by a framework): this worker's copy only,
            # never the array the other workers and the main process share.
            self._worker_resume = (epoch, passes or self._fresh_pass(self._world()), 0)
            return
        self._shared.restore(epoch, passes)
        self._pass, self._yielded = None, 0

    def _load_worker_state(self, epoch: int, passes: List[Pass], worker_state: Any) -> None:
        worker, num_workers = worker_and_count()
        ok = isinstance(worker_state, dict) and worker_state.get("id") == worker and \
            worker_state.get("num_workers") == num_workers and isinstance(worker_state.get("consumed"), int) and \
            not isinstance(worker_state.get("consumed"), bool) and worker_state["consumed"] >= 0
        if not ok or torch.utils.data.get_worker_info() is None:
            raise InvalidArgumentError(
                f"cannot resume: this state is DataLoader worker {worker_state!r:.80}'s own position, which only "
                "that worker can continue (torchdata's StatefulDataLoader restores it there, with the same "
                "num_workers); save the position with s3stream.DataLoader.state_dict() to resume elsewhere")
        skip, batch = int(worker_state["consumed"]), worker_state.get("batch_size")
        self._worker_resume, self._resume_batch = (epoch, passes, skip), batch
        left = split_for(passes, self._total()).per_rank - passes[-1][3]
        if skip >= worker_share(left, batch or 1, worker, num_workers):
            # This worker had delivered its whole share: the pass after the one it continues (torchdata
            # starts a fresh one at once when the saved iterator had finished) reads the next epoch.
            self._shared.advance(epoch)

    # -- the start of an iteration ------------------------------------------------------------------------
    def _batch_for(self, detected: Optional[int]) -> int:
        if detected is None:
            return self.batch_size or 1
        if self.batch_size is not None and detected != self.batch_size and not self._warned_batch:
            self._warned_batch = True
            print(f"s3stream: {self._component}(batch_size={self.batch_size}) but the DataLoader takes batches of "
                  f"{detected}; dealing batches of {detected} to its workers", file=sys.stderr)
        return detected

    def _start_pass(self, frame: Any) -> PassStart:
        """Called at the first next() of an iteration, with its caller's frame (DataLoader's fetcher
        asking for a batch, which names the batch size): what this iteration reads. A position torchdata
        restored in this worker applies to this one iteration only."""
        consumer = detect(self, frame)
        if consumer.shard is not None:
            forward_state(consumer.shard, self)
        if consumer.lightning_resume_lost and worker_and_count()[0] == 0:
            _warn_once(f"s3stream: Lightning is resuming this run from a checkpoint, but it cannot checkpoint a plain "
                       f"torch DataLoader nor tell its {self._component} the epoch: the data starts over at epoch "
                       f"{self.epoch}'s order, and a position inside an epoch is lost. Return s3stream.DataLoader(...) "
                       "from train_dataloader() to resume exactly")
        if torch.utils.data.get_worker_info() is not None:
            adopt_worker(consumer.fetcher)  # batches cross to the loop by reference, whoever built the loader
        rank, world = rank_and_world(self._rank_arg, self._world_arg)
        idle = False
        if consumer.accelerate_dispatch:
            # Accelerate reads for every process on process 0 and splits batches itself; the others make
            # an iterator they never advance (its prefetching would be wasted GETs).
            rank, world, idle = 0, 1, rank != 0
        batch = self._iter_batch = self._batch_for(consumer.batch_size)
        (epoch, passes, skip), self._worker_resume = self._peek_pass(), None
        if skip and self._resume_batch != batch:
            raise InvalidArgumentError(
                f"cannot resume this DataLoader worker: its position counts batches of {self._resume_batch}, "
                f"the DataLoader now takes {batch}; resume with the saved batch size")
        if skip and passes[-1][:3] != (world, self._stripe, self.remainder):
            raise InvalidArgumentError(
                "cannot resume this DataLoader worker: its own position continues only the same split (world size "
                f"{passes[-1][0]}, now {world}); s3stream.DataLoader.state_dict() saves one that resumes at any "
                "world size")
        if passes[-1][0] != world:  # the world changed since the position was saved: continue it elastically
            passes = continue_passes(passes, world, self._stripe, self.remainder)
        worker, num_workers = worker_and_count()
        self._pass, self._yielded, self._worker_skip = (epoch, passes), 0, skip
        return PassStart(consumer, rank, world, batch, epoch, passes, skip, worker, num_workers, idle)

    def _laid_out(self, samples: Iterator[Any], start: PassStart) -> Iterator[Any]:
        """``samples`` as the consumer expects them (Accelerate's IterableDatasetShard: consumers.py)."""
        if start.consumer.shard is None:
            return samples
        return shard_layout(samples, start.consumer.shard, start.world, start.batch)


__all__ = ["PassStart", "PlannedIterable", "Position"]
