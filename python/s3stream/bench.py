"""``s3stream bench URL``: how fast does *your* data reach a training loop?

Reads a dataset the way training would (``s3stream.DataLoader``, shuffled, batches of
``--batch-size``) into an empty loop, once per ``num_workers`` in ``--workers``, and prints samples/s,
MB/s and the time to the first batch for each: the answer to "is my loader the bottleneck?" before a
GPU is involved, the way fio answers it for a disk.

The URL names tar shards (a ``.tar`` URI, a brace pattern, or a prefix holding shards: read with
:class:`s3stream.ShardDataset`) or a prefix of objects, one per sample (read with
:class:`s3stream.MapDataset` and :class:`s3stream.EpochSampler`). Bytes are counted in the worker
that fetched them, so nothing but two integers crosses to the loop: what is measured is the
loading, not a transfer the training loop would not make. Options: ``s3stream bench --help``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence


# A steady rate needs a window this long after the first batch: a shorter one is mostly read-ahead
# that arrived while the first batch was awaited, and its rate says nothing about the loader.
MIN_STEADY_S = 0.25


@dataclass
class RunResult:
    """One pass of the loader at one ``num_workers``."""

    num_workers: int
    samples: int = 0
    bytes: int = 0
    first_batch_s: Optional[float] = None  # from iter(loader) to the first batch: worker start-up included
    samples_per_s: Optional[float] = None  # after the first batch; None when that window was too short
    mb_per_s: Optional[float] = None  # payload bytes (10^6) per second, after the first batch
    pass_samples_per_s: Optional[float] = None  # the whole pass, start-up included
    complete: bool = False  # the pass reached the end of the epoch (else --seconds stopped it)
    error: Optional[str] = None



@dataclass
class BenchResult:
    urls: List[str]
    kind: str  # "shards" or "objects"
    dataset: str  # the dataset's repr
    setup_s: float  # listing and indexing, once
    batch_size: int
    seconds: float
    runs: List[RunResult] = field(default_factory=list)


def count_batch(samples: Sequence[Any]) -> Dict[str, int]:
    """The collate function: how many samples and payload bytes, computed in the worker."""
    total = 0
    for sample in samples:
        values = sample.values() if isinstance(sample, dict) else (sample.data,)  # shard dict / map Sample
        for value in values:
            if not isinstance(value, (str, int)):
                total += memoryview(value).nbytes  # Buffers: no copy
    return {"samples": len(samples), "bytes": total}


def _open_dataset(urls: List[str], kind: str, shuffle: bool, client: Any) -> tuple:
    from .urls import SHARD_SUFFIXES, canonical, expand_braces, is_shard

    if kind == "auto":
        expanded = [u for url in urls for u in expand_braces(url)]
        if any(is_shard(u) for u in expanded):
            kind = "shards"
        else:  # prefixes: shards if any listed object is one
            kind = "objects"
            for url in expanded:
                for info in client.list(canonical(url)):
                    if info.key.lower().endswith(SHARD_SUFFIXES):
                        kind = "shards"
                        break
    if kind == "shards":
        from .shard_dataset import ShardDataset

        return kind, ShardDataset(urls if len(urls) > 1 else urls[0], client=client, shuffle=shuffle)
    if len(urls) != 1:
        raise SystemExit("s3stream bench: objects are read from one prefix; give one URL")
    from .map_dataset import MapDataset
    from .shard_index import SIDECAR_SUFFIX
    from .urls import store_root

    # Every object under the prefix is a sample, but shard index sidecars are not data.
    prefix = canonical(urls[0])
    uris = [store_root(prefix) + o.key for o in client.list(prefix) if not o.key.endswith(("/", SIDECAR_SUFFIX))]
    if not uris:
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(f"no objects under {prefix}; check the prefix")
    dataset = MapDataset.from_objects(uris, client=client)
    dataset.source = prefix
    return kind, dataset


def _loader(dataset: Any, kind: str, num_workers: int, batch_size: int, shuffle: bool) -> Any:
    from .loader import DataLoader

    sampler = None
    if kind == "objects":
        from .sampler import EpochSampler

        sampler = EpochSampler(dataset, shuffle=shuffle)
    return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, sampler=sampler,
                      collate_fn=count_batch, persistent_workers=False)


class _Progress:
    """tqdm when it is installed, else one line on stderr refreshed each second."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label, self.enabled, self.bar, self.last = label, enabled, None, 0.0
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(desc=label, unit=" samples", file=sys.stderr, leave=False)
            except ImportError:
                pass

    def update(self, n: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.last >= 1.0:
            self.last = now
            print(f"\r{self.label}: {total:,} samples", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.last:
            print(file=sys.stderr)


def run_once(dataset: Any, kind: str, num_workers: int, batch_size: int, seconds: float, shuffle: bool,
             progress: bool) -> RunResult:
    """One pass (or ``seconds`` of one) at ``num_workers``."""
    result = RunResult(num_workers)
    loader = _loader(dataset, kind, num_workers, batch_size, shuffle)
    bar = _Progress(f"num_workers={num_workers}", progress)
    t0 = time.perf_counter()
    it = iter(loader)
    first = counted_from = None
    after_first = after_first_bytes = 0
    try:
        for batch in it:
            now = time.perf_counter()
            result.samples += batch["samples"]
            result.bytes += batch["bytes"]
            if first is None:
                first = counted_from = now
                result.first_batch_s = now - t0
            else:
                after_first += batch["samples"]
                after_first_bytes += batch["bytes"]
            bar.update(batch["samples"], result.samples)
            if seconds and now - counted_from >= seconds:
                break
        else:
            result.complete = True
    finally:
        end = time.perf_counter()
        bar.close()
        del it  # shuts the workers down now
    if result.samples and end > t0:
        result.pass_samples_per_s = result.samples / (end - t0)
    window = end - counted_from if counted_from is not None else 0.0
    if window >= MIN_STEADY_S and after_first:
        result.samples_per_s = after_first / window
        result.mb_per_s = after_first_bytes / window / 1e6
    return result


def table(result: BenchResult) -> str:
    lines = [
        f"s3stream bench: {', '.join(result.urls)}",
        f"{result.dataset}; read as {result.kind}, batches of {result.batch_size}; "
        f"listing and indexing took {result.setup_s:.1f} s",
        "",
        f"{'num_workers':>11}  {'first batch':>11}  {'samples/s':>10}  {'MB/s':>8}  {'whole pass/s':>12}  "
        f"{'samples':>9}  pass",
    ]
    short = False
    for r in result.runs:
        if r.error:
            lines.append(f"{r.num_workers:>11}  failed: {r.error}")
            continue
        first = f"{r.first_batch_s:.2f} s" if r.first_batch_s is not None else "-"
        rate = f"{r.samples_per_s:,.0f}" if r.samples_per_s is not None else "-"
        mb = f"{r.mb_per_s:,.1f}" if r.mb_per_s is not None else "-"
        whole = f"{r.pass_samples_per_s:,.0f}" if r.pass_samples_per_s is not None else "-"
        short |= r.samples_per_s is None
        done = "complete" if r.complete else f"stopped after {result.seconds:g} s"
        lines.append(f"{r.num_workers:>11}  {first:>11}  {rate:>10}  {mb:>8}  {whole:>12}  {r.samples:>9,}  {done}")
    lines += ["", "samples/s, MB/s: after the first batch (steady state); whole pass/s: from the start, "
                  "workers' start-up included"]
    if short:
        lines.append(f"-: less than {MIN_STEADY_S:g} s after the first batch, too short for a steady rate "
                     "(the read-ahead held most of it); use a larger dataset")
    measured = [r for r in result.runs if not r.error and r.pass_samples_per_s]
    if measured:
        # Like with like: steady rates when every setting has one, else every whole pass.
        steady = all(r.samples_per_s is not None for r in measured)
        rate = (lambda r: r.samples_per_s) if steady else (lambda r: r.pass_samples_per_s)
        best = max(measured, key=rate)
        what = f"{rate(best):,.0f} samples/s" + (f" ({best.mb_per_s / 1000:.2f} GB/s)" if steady else " over the whole pass")
        lines += ["", f"fastest: num_workers={best.num_workers}, {what}. A training step of batch {result.batch_size} "
                      f"waits for data unless it takes longer than {1000 * result.batch_size / rate(best):.1f} ms."]
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="s3stream bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    return ap.parse_args(argv)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("urls", nargs="+", metavar="URL",
                    help="shards (s3://b/train-{000000..000127}.tar, or a prefix holding .tar files) or a prefix of objects")
    ap.add_argument("--workers", default="0,1,4,8", help="num_workers values to measure (default 0,1,4,8)")
    ap.add_argument("--batch-size", type=int, default=64, help="default 64")
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="stop a pass this long after its first batch (default 20; 0: read the whole epoch)")
    ap.add_argument("--format", choices=("auto", "shards", "objects"), default="auto",
                    help="how to read the URL (default: shards if it names or holds .tar files)")
    ap.add_argument("--no-shuffle", action="store_true", help="read in stored order")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace, client: Any) -> int:
    try:
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        raise SystemExit(f"s3stream bench: --workers takes numbers such as 0,1,4,8, got {args.workers!r}")
    if min(workers) < 0 or args.batch_size < 1 or not 0 <= args.seconds < float("inf"):
        raise SystemExit("s3stream bench: --workers needs values >= 0, --batch-size >= 1, --seconds >= 0")
    report = None
    if args.json:
        try:
            report = open(args.json, "w")  # now, not after minutes of measuring
        except OSError as e:
            raise SystemExit(f"s3stream bench: cannot write --json {args.json}: {e.strerror}")
    try:
        import torch  # noqa: F401  (imported before the clock starts: its import is not the dataset's setup)
    except ImportError:
        raise SystemExit("s3stream bench reads through s3stream.DataLoader, which needs PyTorch: pip install torch")
    shuffle = not args.no_shuffle
    # Sweeping num_workers past the core count is the point here, not a mistake to warn about.
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    t0 = time.perf_counter()
    kind, dataset = _open_dataset(args.urls, args.format, shuffle, client)
    result = BenchResult(list(args.urls), kind, repr(dataset), time.perf_counter() - t0, args.batch_size, args.seconds)
    try:
        for w in workers:
            try:
                result.runs.append(run_once(dataset, kind, w, args.batch_size, args.seconds, shuffle,
                                            not args.no_progress))
            except KeyboardInterrupt:
                raise
            except Exception as e:  # one failing setting (e.g. too many workers) does not end the sweep
                result.runs.append(RunResult(w, error=f"{type(e).__name__}: {e}"))
    except KeyboardInterrupt:
        interrupted = True
        print("\ns3stream bench: interrupted; results so far:", file=sys.stderr)
    else:
        interrupted = False
    print(table(result))
    if report is not None:
        with report:
            json.dump(asdict(result), report, indent=2)
    if interrupted:
        return 130
    return 1 if any(r.error for r in result.runs) else 0


__all__ = ["BenchResult", "RunResult", "count_batch", "run_once", "table"]
