"""One loader per library and scenario, each built the way the library's own docs and benchmarks
use it. Runs inside the run's own process (``python -m bench.run_one``).

Every loader yields the same thing: batches ``(payloads, labels)``, a list of the samples' raw
bytes (bytes, memoryview or s3stream.Buffer: no decoding) and a tensor of their labels, made by the
same :func:`collate` from ``(payload, label)`` samples. What differs is only how the bytes arrive.

Scenarios:

* ``random``: one ~100 KB object per sample, map-style, random order (a seeded shuffle), batch 64.
  s3stream ``MapDataset`` + ``EpochSampler(shuffle=True)`` + ``s3stream.DataLoader``;
  ``s3stream-plain``: the same dataset and sampler in torch's own ``DataLoader`` (what Lightning,
  Accelerate and most scripts build);
  s3torchconnector ``S3MapDataset.from_objects``; boto3 ``get_object`` per sample in a map-style
  dataset (a client per worker process). Peers use ``DataLoader(shuffle=True)``.
* ``shards``: the same samples in tar shards, read sequentially (no shuffling in any library:
  shard order and sample order as written), split across DataLoader workers. s3stream
  ``ShardDataset(shuffle=False)`` (``s3stream-plain``: in torch's own ``DataLoader``, not told the
  batch size); s3torchconnector ``S3IterableDataset.from_objects(shards,
  enable_sharding=True)`` with each shard's stream expanded by ``tarfile`` (as its benchmark does
  with ``load_from_tar``); webdataset ``WebDataset(["pipe:curl -s -f http://.../shard.tar", ...],
  shardshuffle=False)``; mosaicml-streaming ``StreamingDataset(remote="s3://.../mds/...")``;
  litdata ``StreamingDataset("s3://.../litdata/...")`` with ``StreamingDataLoader``.
"""

from __future__ import annotations

import os
import tarfile
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch
import torch.utils.data

from .data import BUCKET, index_of_key, label

REGION = "us-east-1"
ACCESS_KEY = "bench"
SECRET_KEY = "bench"

Sample = Tuple[Any, int]


def collate(samples: List[Sample]) -> Tuple[List[Any], torch.Tensor]:
    """The one collate every library uses: raw payloads as a list, labels as a tensor."""
    return [s[0] for s in samples], torch.tensor([s[1] for s in samples], dtype=torch.int64)


# -- s3stream -----------------------------------------------------------------------------------------


def _s3stream_client(cfg: Dict[str, Any]):
    import s3stream

    return s3stream.Client(endpoint_url=cfg["endpoint"], region=REGION, access_key_id=ACCESS_KEY,
                           secret_access_key=SECRET_KEY)


def _s3stream_object(sample) -> Sample:
    return sample.data, label(sample.index)


def s3stream_random(cfg: Dict[str, Any]):
    import s3stream

    ds = s3stream.MapDataset.from_objects(cfg["uris"], transform=_s3stream_object, client=_s3stream_client(cfg))
    sampler = s3stream.EpochSampler(ds, shuffle=True, seed=cfg["seed"])
    return s3stream.DataLoader(ds, batch_size=cfg["batch_size"], sampler=sampler, num_workers=cfg["workers"],
                               collate_fn=collate)


def _s3stream_shard_sample(sample: Dict[str, Any]) -> Sample:
    return sample["bin"], int(bytes(sample["cls"]))


def s3stream_shards(cfg: Dict[str, Any]):
    import s3stream

    ds = s3stream.ShardDataset(cfg["uris"], client=_s3stream_client(cfg), shuffle=False, batch_size=cfg["batch_size"],
                               transform=_s3stream_shard_sample, write_index=False,
                               index_cache_dir=os.path.join(cfg["tmp"], "index"), progress=False)
    return s3stream.DataLoader(ds, batch_size=cfg["batch_size"], num_workers=cfg["workers"], collate_fn=collate)


# -- s3stream's datasets in torch's own DataLoader (what Lightning, Accelerate and most scripts build) ---


def s3stream_plain_random(cfg: Dict[str, Any]):
    import s3stream

    ds = s3stream.MapDataset.from_objects(cfg["uris"], transform=_s3stream_object, client=_s3stream_client(cfg))
    sampler = s3stream.EpochSampler(ds, shuffle=True, seed=cfg["seed"])
    return torch.utils.data.DataLoader(ds, batch_size=cfg["batch_size"], sampler=sampler,
                                       num_workers=cfg["workers"], collate_fn=collate)


def s3stream_plain_shards(cfg: Dict[str, Any]):
    import s3stream

    # No batch_size for the dataset: it reads the loader's from the worker's first request.
    ds = s3stream.ShardDataset(cfg["uris"], client=_s3stream_client(cfg), shuffle=False,
                               transform=_s3stream_shard_sample, write_index=False,
                               index_cache_dir=os.path.join(cfg["tmp"], "index"), progress=False)
    return torch.utils.data.DataLoader(ds, batch_size=cfg["batch_size"], num_workers=cfg["workers"],
                                       collate_fn=collate)


# -- s3torchconnector ---------------------------------------------------------------------------------


def _s3tc_config():
    from s3torchconnector import S3ClientConfig

    return S3ClientConfig(force_path_style=True)


def _s3tc_object(reader) -> Sample:
    return reader.read(), label(index_of_key(reader.key))


def s3torchconnector_random(cfg: Dict[str, Any]):
    from s3torchconnector import S3MapDataset

    ds = S3MapDataset.from_objects(cfg["uris"], region=REGION, endpoint=cfg["endpoint"], transform=_s3tc_object,
                                   s3client_config=_s3tc_config())
    g = torch.Generator()
    g.manual_seed(cfg["seed"])
    return torch.utils.data.DataLoader(ds, batch_size=cfg["batch_size"], shuffle=True, generator=g,
                                       num_workers=cfg["workers"], collate_fn=collate)


def tar_samples(stream) -> Iterator[Sample]:
    """Samples of a tar stream in the WebDataset layout (``<key>.bin`` + ``<key>.cls``), read
    front to back with ``tarfile``'s streaming mode."""
    current, fields = None, {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            key, _, ext = member.name.partition(".")
            if key != current:
                if fields:
                    yield fields["bin"], int(fields["cls"])
                current, fields = key, {}
            fields[ext] = tar.extractfile(member).read()
    if fields:
        yield fields["bin"], int(fields["cls"])


class S3TorchConnectorTarDataset(torch.utils.data.IterableDataset):
    """s3torchconnector's S3IterableDataset over the shards (split across workers by the library,
    ``enable_sharding=True``), each shard's stream expanded into samples by tarfile."""

    def __init__(self, uris: List[str], endpoint: str) -> None:
        from s3torchconnector import S3IterableDataset

        self.shards = S3IterableDataset.from_objects(uris, region=REGION, endpoint=endpoint,
                                                     s3client_config=_s3tc_config(), enable_sharding=True)

    def __iter__(self) -> Iterator[Sample]:
        for reader in self.shards:
            yield from tar_samples(reader)


def s3torchconnector_shards(cfg: Dict[str, Any]):
    ds = S3TorchConnectorTarDataset(cfg["uris"], cfg["endpoint"])
    return torch.utils.data.DataLoader(ds, batch_size=cfg["batch_size"], num_workers=cfg["workers"],
                                       collate_fn=collate)


# -- boto3 --------------------------------------------------------------------------------------------


class Boto3MapDataset(torch.utils.data.Dataset):
    """``get_object`` per sample; one boto3 client per process, created on first use."""

    def __init__(self, uris: List[str], endpoint: str) -> None:
        self.keys = [u.split("/", 3)[3] for u in uris]
        self.bucket = uris[0].split("/", 3)[2]
        self.endpoint = endpoint
        self._client = None
        self._pid = None

    def _s3(self):
        if self._client is None or self._pid != os.getpid():
            import boto3
            import botocore.config

            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=SECRET_KEY, config=botocore.config.Config(s3={"addressing_style": "path"}))
            self._pid = os.getpid()
        return self._client

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> Sample:
        key = self.keys[i]
        body = self._s3().get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body, label(index_of_key(key))

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_client": None, "_pid": None}


def boto3_random(cfg: Dict[str, Any]):
    ds = Boto3MapDataset(cfg["uris"], cfg["endpoint"])
    g = torch.Generator()
    g.manual_seed(cfg["seed"])
    return torch.utils.data.DataLoader(ds, batch_size=cfg["batch_size"], shuffle=True, generator=g,
                                       num_workers=cfg["workers"], collate_fn=collate)


# -- webdataset ---------------------------------------------------------------------------------------


def _wds_sample(sample: Dict[str, Any]) -> Sample:
    return sample["bin"], int(sample["cls"])


def webdataset_shards(cfg: Dict[str, Any]):
    import webdataset as wds

    urls = [f"pipe:curl -s -f {cfg['endpoint']}/{BUCKET}/{key}" for key in cfg["keys"]]
    # empty_check raises in a worker that gets no shard (fewer shards than workers): off only then.
    ds = wds.WebDataset(urls, shardshuffle=False, empty_check=len(urls) >= max(1, cfg["workers"])).map(_wds_sample)
    return torch.utils.data.DataLoader(ds, batch_size=cfg["batch_size"], num_workers=cfg["workers"],
                                       collate_fn=collate)


# -- mosaicml-streaming -------------------------------------------------------------------------------


def mosaic_shards(cfg: Dict[str, Any]):
    from .data import import_streaming

    streaming = import_streaming()
    os.environ["S3_ENDPOINT_URL"] = cfg["endpoint"]
    try:
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
    except Exception:
        pass

    class MosaicDataset(streaming.StreamingDataset):
        def get_item(self, *args: Any, **kwargs: Any) -> Sample:  # type: ignore[override]
            s = super().get_item(*args, **kwargs)
            return s["bin"], int(s["cls"])

    ds = MosaicDataset(remote=f"s3://{BUCKET}/mds/{cfg['shard_mb']}MB", local=os.path.join(cfg["tmp"], "mds"),
                       batch_size=cfg["batch_size"], shuffle=False)
    return torch.utils.data.DataLoader(ds, batch_size=cfg["batch_size"], num_workers=cfg["workers"],
                                       collate_fn=collate)


# -- litdata ------------------------------------------------------------------------------------------


def _litdata_sample(sample: Dict[str, Any]) -> Sample:
    return bytes(sample["bin"]), int(sample["cls"])  # bin is a memoryview into the chunk: not picklable


def litdata_shards(cfg: Dict[str, Any]):
    import litdata
    from litdata.streaming import downloader

    # litdata fetches chunks with obstore, which refuses a plain-http endpoint unless its client
    # options allow it, and litdata passes fixed client options (which override AWS_ALLOW_HTTP).
    # Real S3 is https; against this http stand-in, add allow_http to litdata's own options.
    if hasattr(downloader, "_OBSTORE_CLIENT_OPTIONS"):
        downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": "true"}

    ds = litdata.StreamingDataset(
        f"s3://{BUCKET}/litdata/{cfg['shard_mb']}MB", cache_dir=os.path.join(cfg["tmp"], "litdata"),
        storage_options={"endpoint_url": cfg["endpoint"], "region_name": REGION, "aws_access_key_id": ACCESS_KEY,
                         "aws_secret_access_key": SECRET_KEY},
        transform=_litdata_sample)
    return litdata.StreamingDataLoader(ds, batch_size=cfg["batch_size"], num_workers=cfg["workers"],
                                       collate_fn=collate)


# -- registry -----------------------------------------------------------------------------------------

RUNNERS: Dict[Tuple[str, str], Callable[[Dict[str, Any]], Any]] = {
    ("s3stream", "random"): s3stream_random,
    ("s3stream-plain", "random"): s3stream_plain_random,
    ("s3torchconnector", "random"): s3torchconnector_random,
    ("boto3", "random"): boto3_random,
    ("s3stream", "shards"): s3stream_shards,
    ("s3stream-plain", "shards"): s3stream_plain_shards,
    ("s3torchconnector", "shards"): s3torchconnector_shards,
    ("webdataset", "shards"): webdataset_shards,
    ("mosaic", "shards"): mosaic_shards,
    ("litdata", "shards"): litdata_shards,
}

# The module each library needs: a cell whose library is missing is skipped, not failed.
REQUIRES = {
    "s3stream": "s3stream",
    "s3stream-plain": "s3stream",
    "s3torchconnector": "s3torchconnector",
    "boto3": "boto3",
    "webdataset": "webdataset",
    "mosaic": "streaming",
    "litdata": "litdata",
}

LIBRARIES = ["s3stream", "s3stream-plain", "s3torchconnector", "boto3", "webdataset", "mosaic", "litdata"]


def preload(library: str) -> None:
    """Imports what the library needs, so that import time is not counted as time to first batch."""
    if library == "mosaic":
        from .data import import_streaming

        import_streaming()
    elif library == "litdata":
        import litdata.streaming.downloader  # noqa: F401
    elif library == "s3torchconnector":
        import s3torchconnector  # noqa: F401
    elif library == "boto3":
        import boto3  # noqa: F401
    elif library == "webdataset":
        import webdataset  # noqa: F401
    elif library.startswith("s3stream"):
        import s3stream.loader  # noqa: F401
        import s3stream.map_dataset  # noqa: F401
        import s3stream.shard_dataset  # noqa: F401


def build(cfg: Dict[str, Any]):
    """The loader for ``cfg["library"]`` x ``cfg["scenario"]`` (see run_one for the keys of cfg)."""
    return RUNNERS[(cfg["library"], cfg["scenario"])](cfg)
