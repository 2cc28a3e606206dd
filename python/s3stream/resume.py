"""What every resumable component shares: how many samples a rank gets, the passes an epoch
was read in, and the checks a saved position must pass before an epoch continues from it.

One place, so that :class:`s3stream.EpochSampler` and :class:`s3stream.ShardDataset` split the
remainder the same way as the native epoch plan and refuse the same states with the same words.

Elastic resume (docs/epoch_plan.md): an epoch's global sequence does not depend on the world size;
ranks take turns of ``stripe`` positions of what a pass has left to read (native ``RankSplit``). A
position in an epoch is the list of its passes, ``[[world_size, stripe, remainder, consumed],
...]``: every pass but the last ran to where all its ranks stopped, and the last is the current
one. What pass *k* reads is the whole epoch less what passes 0..k-1 delivered, so the state of any
one rank describes the whole job, and a job of another size continues it with a new pass.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple

from . import _core
from .errors import InvalidArgumentError

REMAINDERS = ("drop", "pad")
PLAN_VERSION = 2  # 1: ranks took contiguous slices of the epoch (no elastic resume)
MAX_PASSES = 32  # passes one epoch may be read in (each a resume at another world size)

Pass = Tuple[int, int, str, int]  # (world_size, stripe, remainder, consumed)


SEED_MASK = (1 << 64) - 1  # the native generator takes 64 bits: any int seed is taken modulo 2^64


def check_order_options(shuffle: Any, seed: Any) -> None:
    """``shuffle`` a bool and ``seed`` an int (any: taken modulo 2^64), or InvalidArgumentError."""
    if not isinstance(shuffle, bool):
        raise InvalidArgumentError(f"shuffle must be True or False, got {shuffle!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgumentError(f"seed must be an integer, got {seed!r}")


def native_remainder(remainder: str) -> Any:
    return _core.Remainder.drop if remainder == "drop" else _core.Remainder.pad


def split_for(passes: Sequence[Pass], total: int) -> Any:
    """The native RankSplit of the last of ``passes``: what it reads, and how its ranks share it."""
    remaining: List[Tuple[int, int]] = [(0, total)]
    for world, stripe, remainder, consumed in passes[:-1]:
        remaining = _core.RankSplit.make(remaining, world, stripe, native_remainder(remainder)).after(consumed)
    world, stripe, remainder, _ = passes[-1]
    return _core.RankSplit.make(remaining, world, stripe, native_remainder(remainder))


def continue_passes(passes: Sequence[Pass], world: int, stripe: int, remainder: str) -> List[Pass]:
    """The passes a job of ``world`` ranks continues a saved epoch with: the saved last pass itself
    when nothing about the split changed (every rank resumes its own share), else a new pass over
    what the saved one left."""
    passes = [tuple(p) for p in passes]  # type: ignore[misc]
    w, u, r, consumed = passes[-1]
    if (w, u, r) == (world, stripe, remainder):
        return passes  # type: ignore[return-value]
    if consumed == 0:  # a pass that delivered nothing: the new one replaces it (the same remainder of the epoch)
        return passes[:-1] + [(world, stripe, remainder, 0)]  # type: ignore[list-item]
    if len(passes) >= MAX_PASSES:
        raise InvalidArgumentError(f"cannot resume: the epoch was already read in {len(passes)} passes (resumed "
                                   f"at another world size that often); finish it at world size {w}")
    return passes + [(world, stripe, remainder, 0)]  # type: ignore[list-item]


def check_passes(state: Mapping[str, Any], total: int, component: str) -> List[Pass]:
    """The saved ``passes``, checked (they come from a file): each consumed count within its pass."""
    if state.get("plan") != PLAN_VERSION or not isinstance(state.get("passes"), list):
        raise InvalidArgumentError(
            f"cannot resume: this {component} state comes from an s3stream whose epoch plan differs (plan "
            f"{state.get('plan', 1)}, this one reads plan {PLAN_VERSION}); resume with the version that saved it, "
            "or start the epoch over")
    raw = state["passes"]
    if not 1 <= len(raw) <= MAX_PASSES:
        raise InvalidArgumentError(f"cannot resume: {len(raw)} passes in the state (1..{MAX_PASSES} expected)")
    passes: List[Pass] = []
    for item in raw:
        ok = isinstance(item, (list, tuple)) and len(item) == 4 and item[2] in REMAINDERS and all(
            isinstance(v, int) and not isinstance(v, bool) for v in (item[0], item[1], item[3]))
        if not ok or item[0] < 1 or item[1] < 1 or item[3] < 0:
            raise InvalidArgumentError(f"cannot resume: not a pass [world_size, stripe, remainder, consumed]: {item!r:.100}")
        passes.append((item[0], item[1], item[2], item[3]))
        try:
            per_rank = split_for(passes, total).per_rank
        except ValueError as e:
            raise InvalidArgumentError(f"cannot resume: the saved passes do not fit this data: {e}") from None
        if passes[-1][3] > per_rank:
            raise InvalidArgumentError(f"cannot resume: consumed={passes[-1][3]} is past its pass's {per_rank} "
                                       "samples per rank")
    return passes


def samples_per_rank(total: int, world_size: int, remainder: str) -> int:
    """Samples each rank gets in an epoch: ``total // world_size`` with ``"drop"`` (the rest is left
    out), ``ceil(total / world_size)`` with ``"pad"`` (the rest is filled by repeating samples from
    the start of the epoch's order). The native plan's own arithmetic (src/pipeline/epoch_plan.cc)."""
    if remainder not in REMAINDERS:
        raise InvalidArgumentError(f"remainder must be 'drop' or 'pad', got {remainder!r}")
    return _core.samples_per_rank(total, world_size, native_remainder(remainder))


def check_state(state: Any, mine: Mapping[str, Any], *, component: str, total: int) -> Tuple[int, List[Pass]]:
    """Checks a saved position against the component that is to continue from it.

    Args:
        state: the saved ``{"epoch", "passes", ...}`` (from the component's ``state_dict``).
        mine: this component's identity (seed, shuffle, data fingerprint, ...). Each field must be
            equal in ``state``; fields ``mine`` does not know (None) are not checked. The world
            size, batch size and number of workers may differ: that is elastic resume.
        component: its name, for messages (``"EpochSampler"``).
        total: samples in an epoch's global sequence.

    Returns:
        ``(epoch, passes)``.

    Raises:
        InvalidArgumentError: not such a state, or one from other data or settings; the message
            names the first field that differs.
    """
    if not isinstance(state, Mapping) or not {"epoch", "passes"} <= state.keys():
        if isinstance(state, Mapping) and {"epoch", "consumed"} <= state.keys():
            check_passes(state, total, component)  # an older plan's state: says so
        raise InvalidArgumentError(f"not an {component} state (needs 'epoch' and 'passes'): {state!r:.200}")
    for key, value in mine.items():
        saved: Optional[Any] = state.get(key)
        if value is not None and saved != value:
            raise InvalidArgumentError(
                f"cannot resume: the saved state has {key}={saved!r} but this {component} has {value!r} "
                "(a resumed run needs the same data, seed and shuffle)"
            )
    epoch = state["epoch"]
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise InvalidArgumentError(f"cannot resume: epoch must be a non-negative integer, got {epoch!r}")
    return epoch, check_passes(state, total, component)


__all__ = ["REMAINDERS", "SEED_MASK", "check_order_options", "check_passes", "check_state", "continue_passes", "samples_per_rank", "split_for"]
