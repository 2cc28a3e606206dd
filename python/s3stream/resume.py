"""What every resumable component shares: how many samples a rank gets, and the checks a saved
position must pass before an epoch continues from it.

One place, so that :class:`s3stream.EpochSampler` and :class:`s3stream.ShardDataset` split the
remainder the same way as the native epoch plan and refuse the same states with the same words.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from . import _core
from .errors import InvalidArgumentError

REMAINDERS = ("drop", "pad")


def samples_per_rank(total: int, world_size: int, remainder: str) -> int:
    """Samples each rank gets in an epoch: ``total // world_size`` with ``"drop"`` (the rest is left
    out), ``ceil(total / world_size)`` with ``"pad"`` (the rest is filled by repeating samples from
    the start of the epoch's order). The native plan's own arithmetic (src/pipeline/epoch_plan.cc)."""
    if remainder not in REMAINDERS:
        raise InvalidArgumentError(f"remainder must be 'drop' or 'pad', got {remainder!r}")
    native = _core.Remainder.drop if remainder == "drop" else _core.Remainder.pad
    return _core.samples_per_rank(total, world_size, native)


def check_state(state: Any, mine: Mapping[str, Any], *, component: str, per_rank: int) -> Tuple[int, int]:
    """Checks a saved position against the component that is to continue from it.

    Args:
        state: the saved ``{"epoch", "consumed", ...}`` (from the component's ``state_dict``).
        mine: this component's identity (seed, shuffle, world size, ...). Each field must be equal
            in ``state``; fields ``mine`` does not know (None) or the saved state lacks (an older
            format) are not checked.
        component: its name, for messages (``"EpochSampler"``).
        per_rank: samples per rank in an epoch: ``consumed`` may not go past it.

    Returns:
        ``(epoch, consumed)``.

    Raises:
        InvalidArgumentError: not such a state, or one from other data or settings; the message
            names the first field that differs.
    """
    if not isinstance(state, Mapping) or not {"epoch", "consumed"} <= state.keys():
        raise InvalidArgumentError(f"not an {component} state (needs 'epoch' and 'consumed'): {state!r:.200}")
    for key, value in mine.items():
        saved: Optional[Any] = state.get(key)
        if value is not None and saved is not None and saved != value:
            raise InvalidArgumentError(
                f"cannot resume: the saved state has {key}={saved!r} but this {component} has {value!r} "
                "(a resumed run needs the same data, seed, shuffle, world size, batch size and remainder)"
            )
    epoch, consumed = state["epoch"], state["consumed"]
    for name, v in (("epoch", epoch), ("consumed", consumed)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidArgumentError(f"cannot resume: {name} must be a non-negative integer, got {v!r}")
    if consumed > per_rank:
        raise InvalidArgumentError(f"cannot resume: consumed={consumed} is past the epoch's {per_rank} samples per rank")
    return epoch, consumed


__all__ = ["REMAINDERS", "check_state", "samples_per_rank"]
