"""The arithmetic of a mix (docs/epoch_plan.md, "Mixing"): how many samples each source gives an
epoch, and which sample of the source each draw is.

Pure functions of the sources' lengths, the weights and the chosen epoch length, in exact rational
arithmetic (``fractions.Fraction``: a float weight is taken at its exact binary value), so every
rank and worker, on any machine, computes the same counts.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import List, Optional, Sequence, Tuple, Union

from .errors import InvalidArgumentError

LENGTHS = ("longest", "shortest")
MAX_EPOCH = 1 << 48  # samples in one mix epoch (the native MixSchedule's bound)

Length = Union[str, int]


def parse_weights(weights: Optional[Sequence[float]], lengths: Sequence[int]) -> List[Fraction]:
    """The weights as exact fractions; None: proportional to the sources' lengths."""
    if weights is None:
        return [Fraction(n) for n in lengths]
    if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
        raise InvalidArgumentError(f"weights must be a list of numbers, one per source, got {weights!r:.80}")
    weights = list(weights)
    if len(weights) != len(lengths):
        raise InvalidArgumentError(f"weights has {len(weights)} entries but the mix has {len(lengths)} sources; "
                                   "give one weight per source, in the same order")
    out = []
    for i, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w < 0:
            raise InvalidArgumentError(f"weights[{i}] is {w!r}: each weight must be a finite number >= 0 "
                                       "(0 leaves the source out)")
        out.append(Fraction(w) if isinstance(w, numbers.Rational) else Fraction(float(w)))
    if sum(out) == 0:
        raise InvalidArgumentError(f"the weights {weights!r} add up to 0: give at least one source a positive weight")
    return out


def epoch_total(lengths: Sequence[int], weights: Sequence[Fraction], length: Length) -> int:
    """Samples in one mix epoch.

    * ``"longest"``: the fewest samples in which every source, at its weight, delivers at least its
      own whole epoch: the source that needs the most is read once, the others are upsampled.
    * ``"shortest"``: the most samples in which no source, at its weight, needs more than its own
      epoch: stop at the first exhausted; the others are downsampled.
    * an int: exactly that many.
    """
    total_weight = sum(weights)
    if isinstance(length, bool) or not isinstance(length, (int, str)):
        raise InvalidArgumentError(f"length must be 'longest', 'shortest' or a number of samples, got {length!r}")
    if isinstance(length, str):
        needs = [n * total_weight / w for n, w in zip(lengths, weights) if w > 0]  # samples until s is read once
        if length == "longest":
            total = max(math.ceil(x) for x in needs)
        elif length == "shortest":
            total = min(math.floor(x) for x in needs)
        else:
            raise InvalidArgumentError(f"length must be 'longest', 'shortest' or a number of samples, got {length!r}")
    else:
        total = length
    if not 1 <= total <= MAX_EPOCH:
        raise InvalidArgumentError(f"a mix epoch must hold 1 to 2^48 samples, this one would hold {total}; "
                                   "choose another length=")
    return total


def apportion(total: int, weights: Sequence[Fraction]) -> List[int]:
    """Each source's count in an epoch of ``total`` samples, by largest remainder (Hamilton): each
    gets the whole part of its quota ``total * w / sum(w)``, and the samples left go one each to the
    largest fractional parts, ties to the earlier source. Counts add up to ``total`` and each is within
    one of its quota."""
    total_weight = sum(weights)
    quotas = [total * w / total_weight for w in weights]
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda s: (-(quotas[s] - counts[s]), s))
    for s in by_remainder[: total - sum(counts)]:
        counts[s] += 1
    return counts


def source_sample(epoch: int, count: int, length: int, draw: int) -> Tuple[int, int]:
    """(source epoch, position in that epoch's sequence) of a source's ``draw``-th draw in mix epoch
    ``epoch``: the mix reads each source as one endless stream of its epochs, ``count`` samples per
    mix epoch, so mix epoch ``e`` continues where ``e - 1`` stopped."""
    return divmod(epoch * count + draw, length)


__all__ = ["LENGTHS", "MAX_EPOCH", "apportion", "epoch_total", "parse_weights", "source_sample"]
