"""MapDataset: a map-style dataset with one object per sample (one JPEG per image, ...).

::

    ds = s3stream.MapDataset.from_prefix("s3://bucket/train/", transform=decode)
    sampler = s3stream.EpochSampler(ds, shuffle=True, seed=0)      # ranks, epochs, resume
    loader = s3stream.DataLoader(ds, batch_size=64, sampler=sampler, num_workers=8)

* The listing happens once, at construction, with many LIST requests in flight, and travels with
  the dataset to every DataLoader worker (fork or spawn) and every epoch: no LIST per epoch or per
  worker. A manifest (``s3stream ls --manifest train.jsonl s3://bucket/train/``, then
  ``MapDataset.from_manifest("train.jsonl")``) skips the listing altogether and may carry labels.
* ``ds[i]`` fetches one object; ``ds.__getitems__(indices)`` (what DataLoader calls for a batch)
  fetches the whole batch concurrently with one :meth:`s3stream.Client.get_many`.
* A sample is a :class:`Sample` ``(key, data, index)``: ``data`` is the object's bytes as a zero-copy
  :class:`s3stream.Buffer`; ``torch.frombuffer(sample.data, dtype=torch.uint8)`` is a tensor over the
  same memory, without a copy.
* The keys are stored in one bytes blob plus an offsets array, not as a list of str: 10 M keys cost
  about their UTF-8 size, pickle in one piece for spawn workers, and reading them in forked workers
  does not touch per-key reference counts (which would copy the parent's pages into every worker).
"""

from __future__ import annotations

import hashlib
import operator
import os
from array import array
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch.utils.data

from . import collate as _collate  # noqa: F401  (registers Buffer batching)
from .client import Client, default_client
from .consumers import caller, map_fetcher
from .errors import InvalidArgumentError, ObjectChangedError
from .listing import DEFAULT_PARALLELISM, list_objects, uri_base
from .manifest import UNKNOWN_SIZE
from .transfer import adopt_worker

_LIST_PAGE_SIZE = 1000  # keys per ListObjectsV2 request (S3's maximum); tests make it smaller


class Sample(NamedTuple):
    """One object of a :class:`MapDataset`.

    Attributes:
        key: the object's full URI (``s3://bucket/train/0001.jpg``; ``file:///...`` for local
            files): unambiguous even when a dataset spans several buckets.
        data: the object's bytes, a zero-copy :class:`s3stream.Buffer` (buffer protocol, writable);
            ``torch.frombuffer(sample.data, dtype=torch.uint8)`` shares its memory.
        index: the sample's position in the dataset (``dataset[index]``).

    A Sample a DataLoader worker returns untransformed reaches the loop by reference (shared
    memory, see transfer.py), whoever built the loader; pickled any other way, a Buffer carries a
    copy of its bytes.
    """

    key: str
    data: Any
    index: int

    def __repr__(self) -> str:
        try:
            size = f"<{memoryview(self.data).nbytes} bytes>"
        except TypeError:  # a transform-free Sample always holds a buffer, but be safe in a repr
            size = repr(self.data)
        return f"Sample(key={self.key!r}, data={size}, index={self.index})"


class _KeyTable:
    """URIs as ``base + key``: the keys' UTF-8 bytes in one blob, ``offsets[i]:offsets[i + 1]`` each."""

    __slots__ = ("base", "blob", "offsets")

    def __init__(self, base: str, blob: bytes, offsets: array) -> None:
        self.base = base
        self.blob = blob
        self.offsets = offsets

    @classmethod
    def from_strings(cls, base: str, keys: Iterable[str]) -> "_KeyTable":
        blob = bytearray()
        offsets = array("Q", [0])
        for k in keys:
            blob += k.encode("utf-8")
            offsets.append(len(blob))
        return cls(base, bytes(blob), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def key(self, i: int) -> str:
        return self.blob[self.offsets[i] : self.offsets[i + 1]].decode("utf-8")

    def uri(self, i: int) -> str:
        return self.base + self.key(i)

    def __getstate__(self) -> Tuple[str, bytes, array]:
        return self.base, self.blob, self.offsets

    def __setstate__(self, state: Tuple[str, bytes, array]) -> None:
        self.base, self.blob, self.offsets = state


class MapDataset(torch.utils.data.Dataset):
    """A map-style dataset over a fixed list of objects, one object per sample.

    Build it with :meth:`from_prefix` (lists once), :meth:`from_manifest` (reads a manifest, no
    listing) or :meth:`from_objects` (no request at all); ``MapDataset(uris, ...)`` is the same as
    ``from_objects``.

    Args:
        uris: the objects' URIs, in the dataset's order.
        transform: called with each :class:`Sample`; its result is what indexing returns.
        client: the :class:`s3stream.Client` to read with (default: :func:`s3stream.default_client`).

    Pickles by configuration (the client's options and the key table), never by native handles,
    so DataLoader workers work with ``fork`` and ``spawn``.
    """

    def __init__(
        self,
        uris: Sequence[str],
        transform: Optional[Callable[[Sample], Any]] = None,
        client: Optional[Client] = None,
    ) -> None:
        if isinstance(uris, (str, bytes)):
            raise InvalidArgumentError(
                "from_objects takes a list of URIs, not one string; for everything under a prefix "
                "use MapDataset.from_prefix"
            )
        uris = list(uris)
        for u in uris:
            if not isinstance(u, str) or not u:
                raise InvalidArgumentError(f"object URIs must be non-empty strings, got {u!r}")
        if not uris:
            raise InvalidArgumentError("MapDataset.from_objects needs at least one object URI, got none")
        self._init(_KeyTable.from_strings("", uris), transform, client, source=f"{len(uris)} objects")

    def _init(
        self, table: _KeyTable, transform: Optional[Callable[[Sample], Any]], client: Optional[Client], source: str
    ) -> None:
        if transform is not None and not callable(transform):
            raise InvalidArgumentError(f"transform must be callable, got {transform!r}")
        if client is not None and not isinstance(client, Client):
            raise InvalidArgumentError(f"client must be an s3stream.Client, got {type(client).__name__}")
        self._table = table
        self.transform = transform
        self.client = client if client is not None else default_client()
        self.source = source
        self._fingerprint: Optional[str] = None
        self._sizes: Optional[array] = None  # from a manifest
        self._labels: Optional[Sequence[Any]] = None  # from a manifest's label_field
        self.target_transform: Optional[Callable[[Any], Any]] = None

    # -- construction --------------------------------------------------------------------------------
    @classmethod
    def from_objects(
        cls,
        uris: Sequence[str],
        transform: Optional[Callable[[Sample], Any]] = None,
        client: Optional[Client] = None,
    ) -> "MapDataset":
        """A dataset over exactly these objects, in this order. Sends no request (no LIST, no HEAD):
        a missing object surfaces as :class:`s3stream.NotFoundError` when it is read."""
        return cls(uris, transform=transform, client=client)

    @classmethod
    def from_prefix(
        cls,
        uri: str,
        transform: Optional[Callable[[Sample], Any]] = None,
        client: Optional[Client] = None,
        *,
        suffixes: Union[str, Sequence[str], None] = None,
        progress: Optional[bool] = None,
        parallelism: int = DEFAULT_PARALLELISM,
    ) -> "MapDataset":
        """A dataset over every object whose key starts with the URI's key, in key order.

        The listing happens here, once, with up to ``parallelism`` LIST requests in flight over
        ranges of the key space (:func:`s3stream.listing.list_objects`: the same keys, each once,
        in key order, as a sequential listing); memory stays at the keys' size. Keys ending in ``/``
        (the "directory markers" consoles create) are skipped. The prefix is taken verbatim, as S3
        does: ``s3://b/train`` also matches ``s3://b/train2/...``; end it with ``/`` to stay inside
        one "directory". For millions of objects, a manifest (:meth:`from_manifest`) skips the
        listing altogether.

        Args:
            suffixes: keep only keys ending with one of these (``".jpg"`` or ``(".jpg", ".png")``).
            progress: a count of the objects listed on stderr while the listing runs longer than a
                couple of seconds (a tqdm bar when tqdm is installed); None: only when stderr is a
                terminal.
            parallelism: LIST requests in flight at once; 1 lists sequentially.

        Raises:
            InvalidArgumentError: nothing matched (the message names the prefix).
            NotFoundError: the bucket does not exist.
        """
        if not isinstance(uri, str) or not uri:
            raise InvalidArgumentError(f"from_prefix takes a URI such as 's3://bucket/train/', got {uri!r}")
        if isinstance(suffixes, str):
            suffixes = (suffixes,)
        wanted: Optional[Tuple[str, ...]] = tuple(suffixes) if suffixes is not None else None
        if wanted is not None and (not wanted or not all(isinstance(s, str) and s for s in wanted)):
            raise InvalidArgumentError(f"suffixes must be non-empty strings, got {suffixes!r}")
        client = client if client is not None else default_client()

        blob = bytearray()
        offsets = array("Q", [0])
        listed = markers = 0
        previous = b""
        in_order = True
        for info in list_objects(client, uri, parallelism=parallelism, page_size=_LIST_PAGE_SIZE, progress=progress):
            listed += 1
            key = info.key
            if key.endswith("/"):
                markers += 1
            elif wanted is None or key.endswith(wanted):
                encoded = key.encode("utf-8")
                if encoded < previous:
                    in_order = False
                previous = encoded
                blob += encoded
                offsets.append(len(blob))

        table = _KeyTable(uri_base(uri), bytes(blob), offsets)
        del blob
        if len(table) == 0:
            detail = f"{listed:,} keys listed"
            if markers:
                detail += f", {markers:,} of them directory markers"
            if wanted is not None:
                detail += f", none ending in {', '.join(wanted)}"
            raise InvalidArgumentError(f"no objects under {uri} ({detail}); check the prefix")
        if not in_order:
            # S3 lists in UTF-8 byte order; a store that does not (listed sequentially: a parallel
            # listing refuses it) still gets a deterministic order, because the epoch plan is a
            # function of the listing's order.
            keys = sorted((table.key(i) for i in range(len(table))), key=lambda k: k.encode("utf-8"))
            table = _KeyTable.from_strings(table.base, keys)
        dataset = cls.__new__(cls)
        dataset._init(table, transform, client, source=uri)
        return dataset

    @classmethod
    def from_manifest(
        cls,
        manifest: Union[str, "os.PathLike[str]"],
        transform: Optional[Callable[[Sample], Any]] = None,
        client: Optional[Client] = None,
        *,
        base: Optional[str] = None,
        label_field: Optional[str] = None,
        target_transform: Optional[Callable[[Any], Any]] = None,
        format: Optional[str] = None,
    ) -> "MapDataset":
        """A dataset over the objects a manifest lists, in its order: no LIST request at all.

        ``manifest`` is a local path or an ``s3://`` / ``file://`` URI of JSON lines (one object
        per line, as ``s3stream ls --manifest out.jsonl URI`` writes them:
        ``{"uri": "s3://bucket/train/0001.jpg", "size": 10342, "etag": "..."}``) or of a Parquet
        file with the same columns (``.parquet``: needs pyarrow). See :mod:`s3stream.manifest`.

        Args:
            base: what entries naming ``"key"`` instead of ``"uri"`` are relative to
                (``"s3://bucket/train/"``).
            label_field: a field (column) holding each object's label: then ``dataset[i]`` is
                ``(transform(sample), target_transform(label))``, as torchvision's datasets give
                ``(image, target)``. Integer labels are kept in one compact array.
            target_transform: called with each label.
            format: ``"jsonl"`` or ``"parquet"``; by default from the name (``.parquet``/``.pq``).

        Raises:
            ManifestError: a line or row that is not a valid entry (bad JSON, no key or URI, a size
                that is missing, negative or not a whole number, a missing label, an object listed
                twice): the message names the manifest, the line and the fix.
            MissingDependencyError: a Parquet manifest without pyarrow installed.
            NotFoundError, FileNotFoundError: no such manifest.
        """
        from .manifest import read_manifest

        if target_transform is not None and not callable(target_transform):
            raise InvalidArgumentError(f"target_transform must be callable, got {target_transform!r}")
        if target_transform is not None and label_field is None:
            raise InvalidArgumentError("target_transform needs label_field: the field holding each object's label")
        client = client if client is not None else default_client()
        rows = read_manifest(manifest, client, base=base, label_field=label_field, format=format)
        dataset = cls.__new__(cls)
        dataset._init(_KeyTable(rows.base, rows.blob, rows.offsets), transform, client, source=rows.source)
        dataset._sizes = rows.sizes
        dataset._labels = rows.labels
        dataset.target_transform = target_transform
        return dataset

    # -- access --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._table)

    def uri(self, index: int) -> str:
        """The URI of sample ``index`` (no request)."""
        return self._table.uri(self._check(index))

    def _check(self, index: Any) -> int:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"MapDataset indices must be integers, got {type(index).__name__}") from None
        n = len(self._table)
        if not 0 <= i < n:
            # Negative indices are refused on purpose: samplers never produce them, so one is a bug.
            raise IndexError(f"index {i} is out of range for a MapDataset of {n} objects (valid: 0..{n - 1})")
        return i

    def _finish(self, sample: Sample) -> Any:
        out = self.transform(sample) if self.transform is not None else sample
        if self._labels is None:
            return out
        label = self._labels[sample.index]
        return out, (self.target_transform(label) if self.target_transform is not None else label)

    def label(self, index: int) -> Any:
        """The label of sample ``index`` from the manifest's ``label_field`` (no request)."""
        if self._labels is None:
            raise InvalidArgumentError("this MapDataset has no labels: build it with "
                                       "MapDataset.from_manifest(..., label_field='label')")
        return self._labels[self._check(index)]

    def size(self, index: int) -> Optional[int]:
        """The size in bytes of object ``index`` as its manifest gives it (no request); None where
        the manifest gives none."""
        if self._sizes is None:
            raise InvalidArgumentError("object sizes are known only for a MapDataset built from a manifest")
        size = self._sizes[self._check(index)]
        return None if size == UNKNOWN_SIZE else size

    def _sample(self, uri: str, data: Any, index: int) -> Any:
        """The finished sample, once its object is the size the manifest says (where it says one)."""
        if self._sizes is not None and self._sizes[index] not in (len(data), UNKNOWN_SIZE):
            raise ObjectChangedError(
                f"{uri} is {len(data)} bytes, but the manifest {self.source} says {self._sizes[index]}: the object "
                "changed after the manifest was written; write the manifest again (s3stream ls --manifest)")
        return self._finish(Sample(uri, data, index))

    def __getitem__(self, index: int) -> Any:
        """Fetches sample ``index``: a :class:`Sample`, or ``transform(sample)`` when there is one."""
        i = self._check(index)
        uri = self._table.uri(i)
        _adopt_worker()
        return self._sample(uri, self.client.get(uri), i)

    def __getitems__(self, indices: Sequence[int]) -> List[Any]:
        """Fetches several samples concurrently (one :meth:`Client.get_many`: every GET in flight at
        once, the GIL released while waiting), then applies ``transform`` to each, in order.
        DataLoader calls this with each batch's indices."""
        checked = [self._check(i) for i in indices]
        uris = [self._table.uri(i) for i in checked]
        _adopt_worker()
        buffers = self.client.get_many(uris) if uris else []
        return [self._sample(u, b, i) for u, b, i in zip(uris, buffers, checked)]

    def fingerprint(self) -> str:
        """A short hash of the listing (URIs and their order): a resumed sampler state must come
        from the same data."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(self._table.base.encode("utf-8") + b"\0")
            h.update(self._table.offsets.tobytes())  # little-endian on every platform we build for
            h.update(self._table.blob)
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    def __repr__(self) -> str:
        return f"s3stream.MapDataset({len(self):,} objects from {self.source})"


def _adopt_worker() -> None:
    """In a DataLoader worker, whoever built the loader: the Buffers about to be fetched go to the
    shared arena and the batch crosses to the loop by reference (transfer.py). A few microseconds
    per batch: the fetcher is found anew each time, as StatefulDataLoader may replace it."""
    if torch.utils.data.get_worker_info() is not None:
        adopt_worker(map_fetcher(caller(3)))


__all__ = ["MapDataset", "Sample"]
