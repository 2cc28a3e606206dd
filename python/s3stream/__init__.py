"""s3stream: stream training data from S3-compatible object storage into PyTorch.

>>> import s3stream
>>> client = s3stream.Client(endpoint_url="http://127.0.0.1:9000")
>>> data = client.get("s3://bucket/key")          # zero-copy Buffer
>>> with s3stream.open("s3://bucket/ckpt.pt", "wb") as f:
...     torch.save(model.state_dict(), f)
"""

from ._core import Buffer, ObjectInfo
from .client import Client, UploadInfo, default_client
from .errors import (
    CancelledError,
    CorruptDataError,
    InternalError,
    InvalidArgumentError,
    ManifestError,
    MissingDependencyError,
    NotFoundError,
    ObjectChangedError,
    OutOfRangeError,
    PermissionDeniedError,
    S3StreamError,
    TooLargeError,
    UnavailableError,
)
from .io import ObjectWriter, open
from .distributed import rank_and_world, worker_and_count

__version__ = "0.1.0"

# The torch adapters are imported on first use (PEP 562): `import s3stream` stays fast and works
# without torch installed (the client, s3stream.open and the CLI need no torch); touching one of
# these names imports torch, and raises ImportError naming the missing dependency if it is absent.
_LAZY = {
    "MapDataset": ".map_dataset",
    "Sample": ".map_dataset",
    "EpochSampler": ".sampler",
    "DataLoader": ".loader",
    "ShardDataset": ".shard_dataset",
    "Mix": ".mix",
    "decode": ".decoders",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 's3stream' has no attribute {name!r}")
    import importlib

    try:
        value = getattr(importlib.import_module(module, __name__), name)
    except ModuleNotFoundError as e:
        if e.name != "torch" and not (e.name or "").startswith("torch."):
            raise
        raise ImportError(f"s3stream.{name} needs PyTorch: pip install torch") from e
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Buffer",
    "Client",
    "ObjectInfo",
    "ObjectWriter",
    "UploadInfo",
    "default_client",
    "open",
    "rank_and_world",
    "worker_and_count",
    "MapDataset",
    "Sample",
    "EpochSampler",
    "DataLoader",
    "ShardDataset",
    "Mix",
    "decode",
    "S3StreamError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "OutOfRangeError",
    "UnavailableError",
    "ObjectChangedError",
    "CorruptDataError",
    "ManifestError",
    "MissingDependencyError",
    "CancelledError",
    "TooLargeError",
    "InternalError",
]
