"""The epoch, and a restored position in it, shared by an iterable dataset and its DataLoader workers.

An iterable dataset plans in its workers, but ``set_epoch`` and ``load_state_dict`` are called in the
main process, and the worker that reads a pass's last sample must move every later pass (also in
persistent workers) to the next epoch (docs/epoch_plan.md, "Epochs advance by themselves"). So these
few numbers live in a small shared-memory array that forked and spawned workers map: the epoch,
whether the dataset advances it by itself, the epoch a restored position belongs to, and that
position's passes (resume.py), MAX_PASSES entries of (world_size, stripe, remainder, consumed).
Used by :class:`s3stream.ShardDataset` and :class:`s3stream.Mix`.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
from typing import Any, Dict, List, Optional, Sequence

from .errors import InvalidArgumentError
from .resume import MAX_PASSES, REMAINDERS, Pass

_EPOCH, _AUTO_EPOCH, _RESUME_EPOCH, _RESUME_PASSES = range(4)
_PASSES_AT = 4
_SLOTS = _PASSES_AT + 4 * MAX_PASSES


class SharedEpoch:
    """The shared numbers (no lock: single-word reads and writes, and a fork-context lock cannot
    travel to spawn workers)."""

    def __init__(self) -> None:
        self._array: Any = multiprocessing.Array("q", _SLOTS, lock=False)
        self._array[_AUTO_EPOCH], self._array[_RESUME_EPOCH] = 1, -1

    @property
    def epoch(self) -> int:
        return int(self._array[_EPOCH])

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self._array[_EPOCH] = epoch

    @property
    def auto(self) -> bool:
        return bool(self._array[_AUTO_EPOCH])

    @auto.setter
    def auto(self, on: bool) -> None:
        self._array[_AUTO_EPOCH] = int(bool(on))

    def advance(self, epoch: int) -> None:
        """A pass over ``epoch`` read its last sample: with auto on, the next pass reads the next epoch."""
        if self._array[_AUTO_EPOCH]:
            self._array[_EPOCH] = epoch + 1

    def restored(self) -> Optional[List[Pass]]:
        """The passes of the restored position, if it belongs to the current epoch."""
        sh = self._array
        if int(sh[_RESUME_EPOCH]) != int(sh[_EPOCH]):
            return None
        out: List[Pass] = []
        for i in range(int(sh[_RESUME_PASSES])):
            w, u, r, c = sh[_PASSES_AT + 4 * i: _PASSES_AT + 4 * i + 4]
            out.append((int(w), int(u), REMAINDERS[int(r)], int(c)))
        return out

    def restore(self, epoch: int, passes: Sequence[Pass]) -> None:
        """The next pass reads ``epoch`` from ``passes`` (empty: from the epoch's start)."""
        sh = self._array
        sh[_EPOCH], sh[_RESUME_EPOCH], sh[_RESUME_PASSES] = epoch, epoch if passes else -1, len(passes)
        for i, (w, u, r, c) in enumerate(passes):
            sh[_PASSES_AT + 4 * i: _PASSES_AT + 4 * i + 4] = [w, u, REMAINDERS.index(r), c]

    # -- pickling: the shared array to a starting worker, its values anywhere else ------------------
    def __getstate__(self) -> Dict[str, Any]:
        if multiprocessing.context.get_spawning_popen() is None:
            return {"values": list(self._array[:])}  # shared memory cannot travel outside a spawn
        return {"array": self._array}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        if "array" in state:
            self._array = state["array"]
        else:
            self._array = multiprocessing.Array("q", state["values"], lock=False)


class SharedEpochMixin:
    """``set_epoch``, ``epoch`` and ``auto_epoch`` of a dataset that keeps a :class:`SharedEpoch` as
    ``self._shared`` (the resumable-component protocol of loader.py)."""

    _shared: SharedEpoch

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch whose order the next iteration follows (also in persistent workers)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgumentError(f"epoch must be a non-negative integer, got {epoch!r}")
        self._shared.epoch = epoch

    @property
    def epoch(self) -> int:
        return self._shared.epoch

    @property
    def auto_epoch(self) -> bool:
        """Whether the dataset moves to the next epoch by itself once a pass has read its last
        sample (default True): frameworks stop after ``len(loader)`` batches without asking for the
        end of the pass, and never call ``set_epoch`` on an iterable dataset. s3stream.DataLoader,
        which counts what the loop received, turns it off and advances epochs itself."""
        return self._shared.auto

    @auto_epoch.setter
    def auto_epoch(self, on: bool) -> None:
        self._shared.auto = on


__all__ = ["SharedEpoch", "SharedEpochMixin"]
