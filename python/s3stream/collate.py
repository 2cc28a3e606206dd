"""Teaches torch's ``default_collate`` to batch :class:`s3stream.Buffer` fields.

Untransformed samples hold raw Buffers; ``default_collate`` knows only tensors, numbers, strings
and containers. Buffers are batched as lists (as strings are), so a batch of ShardDataset sample
dicts becomes a dict of lists. Imported by the torch adapters; registering twice is harmless.
"""

from __future__ import annotations

from typing import Any, List

from torch.utils.data._utils.collate import default_collate_fn_map

from ._core import Buffer


def collate_buffers(batch: List[Buffer], *, collate_fn_map: Any = None) -> List[Buffer]:
    return list(batch)


default_collate_fn_map.setdefault(Buffer, collate_buffers)

__all__ = ["collate_buffers"]
