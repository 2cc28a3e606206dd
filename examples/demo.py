"""``make demo`` (``python examples/demo.py``): train a small CNN for one epoch from a local S3 stand-in, with s3stream and
with plain boto3, and compare how long each kept the training loop waiting for data.

Steps (each announced on one line):

1. start the local S3 stand-in: nginx on a free loopback port serving a temporary directory in path
   style, every GET/HEAD delayed by a time to first byte and capped per connection, as real S3 is;
2. generate a synthetic, learnable image dataset (per class a pattern and a colour, plus noise) as
   JPEGs, stored both as one object per image (``s3://demo/images/<class>/<id>.jpg``) and as tar
   shards in the WebDataset layout (``s3://demo/shards/train-NNNNNN.tar``: ``<id>.jpg`` +
   ``<id>.cls``), with s3stream's shard index sidecars beside them;
3. train for one epoch streaming the shards with ``s3stream.ShardDataset`` + ``s3stream.DataLoader``;
4. train the same model (same seed, same settings) for one epoch with a map-style dataset doing one
   boto3 ``get_object`` per sample, through ``torch.utils.data.DataLoader``;

then print samples/s, the share of step time spent waiting for the next batch, and the training
loss/accuracy, side by side. The server and the temporary files are removed on exit, Ctrl-C included.

Needs nginx with the lua module (``apt-get install nginx libnginx-mod-http-lua``), torch, Pillow,
numpy and boto3; tqdm for a nicer progress bar (optional). ``make demo`` installs all of it.
"""

from __future__ import annotations

import argparse
import colorsys
import contextlib
import io
import json
import math
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

# The local S3 stand-in lives in the repository's bench/ (it is not part of the installed package).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BUCKET = "demo"
# The stand-in ignores signatures, but both clients sign every request as they would for real S3.
_ACCESS_KEY_ID = "AKIDS3STREAMDEMO"
_SECRET_ACCESS_KEY = "s3stream-demo-secret"
_REGION = "us-east-1"
_MEAN, _STD = 0.5, 0.25  # pixel normalisation: (x / 255 - mean) / std


# --- the local S3 stand-in ---------------------------------------------------------------------------


def _make_server(root: Path, ttfb_s: float, rate: int) -> Any:
    """The nginx stand-in for ``root``, without its moto sidecar (the demo only reads)."""
    from bench.server import LocalS3

    return LocalS3(str(root), ttfb_s=ttfb_s, rate=rate, moto=False)


# --- the synthetic dataset ---------------------------------------------------------------------------


def make_image(cls: int, classes: int, size: int, rng: Any) -> Any:
    """An RGB uint8 array of class ``cls``: the class's pattern (stripes in one of three directions,
    a checkerboard or rings; coarse for classes 0-4, fine for 5-9) at a random phase and scale, in
    the class's colour half of the time and a random one otherwise, on a random background, under
    strong noise. Learnable, but not in one step."""
    import numpy as np

    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    phase = rng.uniform(0, 2 * math.pi)
    freq = (2.5 + (cls // 5) * 2) * rng.uniform(0.8, 1.25)
    kind = cls % 5
    if kind == 0:  # horizontal stripes
        wave = np.sin(2 * math.pi * freq * yy + phase)
    elif kind == 1:  # vertical stripes
        wave = np.sin(2 * math.pi * freq * xx + phase)
    elif kind == 2:  # diagonal stripes
        wave = np.sin(2 * math.pi * freq * (xx + yy) / 1.4 + phase)
    elif kind == 3:  # checkerboard
        wave = np.sin(2 * math.pi * freq * xx + phase) * np.sin(2 * math.pi * freq * yy + phase)
    else:  # rings around a random centre
        cy, cx = rng.uniform(0.3, 0.7, size=2)
        wave = np.sin(2 * math.pi * freq * np.hypot(xx - cx, yy - cy) + phase)
    mask = (wave > 0).astype(np.float32)[..., None]
    hue = (cls / classes + rng.normal(0, 0.06)) % 1.0 if rng.uniform() < 0.5 else rng.uniform()
    colour = np.array(colorsys.hsv_to_rgb(hue, rng.uniform(0.4, 0.9), rng.uniform(0.6, 1.0)), dtype=np.float32)
    background = rng.uniform(10, 120, size=3).astype(np.float32)
    image = mask * colour * 255.0 + (1 - mask) * background + rng.normal(0, 45, size=(size, size, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(mtime), 0o644
    tar.addfile(info, io.BytesIO(data))


def generate_dataset(root: Path, images: int, classes: int, size: int, shard_bytes: int, seed: int) -> Dict[str, Any]:
    """Writes the objects and the shards under ``root/BUCKET``; returns what the runs need."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    bucket = root / BUCKET
    for c in range(classes):
        (bucket / "images" / f"{c:02d}").mkdir(parents=True, exist_ok=True)
    (bucket / "shards").mkdir(parents=True, exist_ok=True)

    keys: List[str] = []
    labels: List[int] = []
    shards: List[str] = []
    tar: Optional[tarfile.TarFile] = None
    tar_path: Optional[Path] = None
    total_bytes = 0
    now = time.time()
    try:
        for i in range(images):
            cls = int(rng.integers(classes))
            buf = io.BytesIO()
            Image.fromarray(make_image(cls, classes, size, rng)).save(buf, format="JPEG", quality=90)
            jpeg = buf.getvalue()
            total_bytes += len(jpeg)
            key = f"images/{cls:02d}/{i:06d}.jpg"
            (bucket / key).write_bytes(jpeg)
            keys.append(key)
            labels.append(cls)
            if tar is None or (tar_path is not None and tar.fileobj.tell() >= shard_bytes):  # type: ignore[union-attr]
                if tar is not None:
                    tar.close()
                tar_path = bucket / "shards" / f"train-{len(shards):06d}.tar"
                shards.append(f"shards/{tar_path.name}")
                tar = tarfile.open(tar_path, "w", format=tarfile.USTAR_FORMAT)
            _tar_add(tar, f"{i:06d}.jpg", jpeg, now)
            _tar_add(tar, f"{i:06d}.cls", str(cls).encode(), now)
    finally:
        if tar is not None:
            tar.close()
    shard_sizes = [(bucket / s).stat().st_size for s in shards]
    return {"keys": keys, "labels": labels, "shards": shards, "image_bytes": total_bytes,
            "shard_bytes": sum(shard_sizes)}


def write_shard_indexes(root: Path, client: Any, shard_uris: Sequence[str]) -> None:
    """Indexes the shards through the server (one streaming pass each, all at once) and writes the
    sidecars beside them in the served directory (the stand-in serves the directory read-only)."""
    import concurrent.futures

    from s3stream.shard_index import ShardIndex, sidecar_uri

    with concurrent.futures.ThreadPoolExecutor(min(16, len(shard_uris))) as pool:
        for index in pool.map(lambda uri: ShardIndex.build(client, uri), shard_uris):
            key = sidecar_uri(index.uri)[len(f"s3://{BUCKET}/"):]
            (root / BUCKET / key).write_bytes(index.to_json())


# --- decoding, datasets, model (module level: picklable for any worker start method) -------------


def decode_jpeg(data: Any) -> Any:
    """JPEG bytes (any buffer) -> normalised float CHW tensor."""
    import numpy as np
    import torch
    from PIL import Image

    with Image.open(io.BytesIO(memoryview(data))) as img:
        array = np.asarray(img.convert("RGB"), dtype=np.float32)
    tensor = torch.from_numpy(array).permute(2, 0, 1)
    return (tensor / 255.0 - _MEAN) / _STD


def shard_sample_transform(sample: Dict[str, Any]) -> Tuple[Any, int]:
    """s3stream.ShardDataset transform: ``{"jpg": Buffer, "cls": Buffer, ...}`` -> (image, label)."""
    return decode_jpeg(sample["jpg"]), int(bytes(sample["cls"]))


class Boto3ImageDataset:
    """The plain-boto3 baseline: map-style, one ``get_object`` per sample, one client per process."""

    def __init__(self, endpoint_url: str, bucket: str, keys: Sequence[str], labels: Sequence[int]) -> None:
        self.endpoint_url, self.bucket = endpoint_url, bucket
        self.keys, self.labels = list(keys), list(labels)
        self._client: Any = None
        self._pid: Optional[int] = None

    def __len__(self) -> int:
        return len(self.keys)

    def _s3(self) -> Any:
        if self._client is None or self._pid != os.getpid():
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3", endpoint_url=self.endpoint_url, region_name=_REGION,
                aws_access_key_id=_ACCESS_KEY_ID, aws_secret_access_key=_SECRET_ACCESS_KEY,
                config=Config(s3={"addressing_style": "path"}),
            )
            self._pid = os.getpid()
        return self._client

    def __getitem__(self, i: int) -> Tuple[Any, int]:
        body = self._s3().get_object(Bucket=self.bucket, Key=self.keys[i])["Body"].read()
        return decode_jpeg(body), self.labels[i]

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_client": None, "_pid": None}


def make_model(classes: int) -> Any:
    from torch import nn

    def block(cin: int, cout: int) -> List[Any]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                nn.MaxPool2d(2)]

    return nn.Sequential(
        *block(3, 16), *block(16, 32), *block(32, 64),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes),
    )


# --- training and measuring --------------------------------------------------------------------------


class _Bar:
    """tqdm when it is installed, else a carriage-return bar on stderr."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.total, self.desc, self.enabled, self.n = total, desc, enabled, 0
        self._tqdm: Any = None
        self._start = time.perf_counter()
        self._last = 0.0
        if enabled:
            try:
                from tqdm import tqdm

                self._tqdm = tqdm(total=total, desc=desc, unit="batch", file=sys.stderr, leave=True,
                                  dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, info: str) -> None:
        self.n += 1
        if not self.enabled:
            return
        if self._tqdm is not None:
            self._tqdm.set_postfix_str(info, refresh=False)
            self._tqdm.update(1)
            return
        now = time.perf_counter()
        if now - self._last < 0.1 and self.n < self.total:
            return
        self._last = now
        width = 30
        filled = int(width * min(self.n, self.total) / max(self.total, 1))
        print(f"\r  {self.desc:>9} [{'#' * filled}{'.' * (width - filled)}] {self.n}/{self.total} "
              f"{now - self._start:5.1f}s {info}", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        if self._tqdm is not None:
            self._tqdm.close()
        else:
            print(file=sys.stderr)


def train_one_epoch(name: str, loader: Any, steps: int, classes: int, seed: int, lr: float,
                    progress: bool) -> Dict[str, Any]:
    """One epoch over ``loader``; per step, the time waiting for the batch and the time computing."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    model = make_model(classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    wait = compute = 0.0
    samples = 0
    losses: List[float] = []
    accuracies: List[float] = []
    first_batch_s = None
    bar = _Bar(steps, name, progress)
    start = time.perf_counter()
    it = iter(loader)  # starts the workers: counted as waiting for data
    try:
        while True:
            t0 = time.perf_counter() if samples else start
            try:
                images, labels = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            if first_batch_s is None:
                first_batch_s = t1 - start
            logits = model(images)
            loss = F.cross_entropy(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_value = float(loss.item())
            t2 = time.perf_counter()
            wait += t1 - t0
            compute += t2 - t1
            samples += int(labels.shape[0])
            losses.append(loss_value)
            accuracies.append(float((logits.argmax(1) == labels).float().mean()))
            bar.update(f"loss={loss_value:.3f} waiting={100 * wait / (wait + compute):.0f}%")
    finally:
        bar.close()
        del it  # shuts the workers down now, not at garbage collection
    elapsed = time.perf_counter() - start
    tail = max(1, min(10, len(losses) // 4))
    return {
        "library": name,
        "samples": samples,
        "steps": len(losses),
        "epoch_s": elapsed,
        "samples_per_s": samples / elapsed if elapsed > 0 else 0.0,
        "wait_s": wait,
        "compute_s": compute,
        "wait_share_pct": 100.0 * wait / (wait + compute) if wait + compute > 0 else 0.0,
        "first_batch_s": first_batch_s or 0.0,
        "loss_first": sum(losses[:tail]) / tail if losses else float("nan"),
        "loss_last": sum(losses[-tail:]) / tail if losses else float("nan"),
        "accuracy_last_pct": 100.0 * sum(accuracies[-tail:]) / tail if accuracies else float("nan"),
        "tail_steps": tail,
    }


def _ms(result: Dict[str, Any], field: str) -> str:
    return f"{1000.0 * result[field] / max(result['steps'], 1):.0f}"


def print_summary(results: List[Dict[str, Any]], out: Any = None) -> None:
    out = out or sys.stdout
    a, b = results
    ratio = a["samples_per_s"] / b["samples_per_s"] if b["samples_per_s"] > 0 else float("inf")
    rows = [
        ("samples/s", f"{a['samples_per_s']:.0f}", f"{b['samples_per_s']:.0f}", f"{ratio:.1f}x"),
        ("waiting for data (% of step time)", f"{a['wait_share_pct']:.1f} %", f"{b['wait_share_pct']:.1f} %", ""),
        ("epoch time (s)", f"{a['epoch_s']:.1f}", f"{b['epoch_s']:.1f}", ""),
        ("per step: waiting / computing (ms)", f"{_ms(a, 'wait_s')} / {_ms(a, 'compute_s')}",
         f"{_ms(b, 'wait_s')} / {_ms(b, 'compute_s')}", ""),
        ("first batch after (s)", f"{a['first_batch_s']:.2f}", f"{b['first_batch_s']:.2f}", ""),
        (f"training loss, first -> last {a['tail_steps']} steps",
         f"{a['loss_first']:.2f} -> {a['loss_last']:.2f}", f"{b['loss_first']:.2f} -> {b['loss_last']:.2f}", ""),
        (f"training accuracy, last {a['tail_steps']} steps",
         f"{a['accuracy_last_pct']:.1f} %", f"{b['accuracy_last_pct']:.1f} %", ""),
    ]
    header = ("", a["library"], b["library"], f"{a['library']}/{b['library']}")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(4)]
    line = lambda r: f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}".rstrip()
    print(line(header), file=out)
    print("-" * (sum(widths) + 6), file=out)
    for r in rows:
        print(line(r), file=out)
    per_step = [r["compute_s"] / max(r["steps"], 1) for r in (a, b)]
    if per_step[1] > 1.3 * per_step[0]:
        print(f"\n(the same training step took {per_step[1] / per_step[0]:.1f}x longer next to {b['library']}'s "
              f"workers: they used more of the CPU the model shares with them)", file=out)
    out.flush()


# --- the command -------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--images", type=int, default=4000, help="synthetic images (default 4000)")
    parser.add_argument("--image-size", type=int, default=64, help="image side in pixels (default 64)")
    parser.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    parser.add_argument("--ttfb-ms", type=float, default=20.0,
                        help="server time to first byte per request (default 20 ms)")
    parser.add_argument("--mbps", type=float, default=100.0,
                        help="server bandwidth per connection in MB/s (10^6 bytes; default 100)")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers for both runs (default 4)")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size for both runs (default 64)")
    parser.add_argument("--shard-mb", type=float, default=4.0, help="target tar shard size in MB (default 4)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (default 3e-3)")
    parser.add_argument("--seed", type=int, default=0, help="data, model and order seed (default 0)")
    parser.add_argument("--out", default=None,
                        help="write results.json and a copy of the dataset here (by default nothing is kept: "
                             "the dataset lives in a temporary directory, removed on exit)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _check(args: argparse.Namespace) -> None:
    for name in ("images", "image_size", "classes", "workers", "batch_size"):
        minimum = 0 if name == "workers" else 1
        if getattr(args, name) < minimum:
            raise SystemExit(f"demo: --{name.replace('_', '-')} must be at least {minimum}")
    if args.classes > args.images:
        raise SystemExit("demo: --classes must not exceed --images")
    if args.ttfb_ms < 0 or args.mbps < 0 or args.shard_mb <= 0:
        raise SystemExit("demo: --ttfb-ms and --mbps must be >= 0, --shard-mb > 0")


def _check_served(endpoint: str, key: str, root: Path) -> None:
    """nginx's workers run as another user when started as root (nobody): say so if they cannot read."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{BUCKET}/{key}", method="HEAD"), timeout=10)
    except urllib.error.HTTPError as e:
        raise SystemExit(f"demo: the local S3 stand-in cannot read {root} (HTTP {e.code}): nginx's "
                         f"workers may run as another user (nobody); point TMPDIR at a directory everyone can "
                         f"read, e.g. TMPDIR=/tmp") from None


def _say(step: int, text: str) -> None:
    print(f"[{step}/5] {text}", flush=True)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    _check(args)
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)  # SIGTERM cleans up like Ctrl-C
    try:
        with contextlib.ExitStack() as stack, warnings.catch_warnings():
            # torch warns when workers outnumber cores; here they mostly wait on the network.
            warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
            return _run(args, stack)
    except KeyboardInterrupt:
        print("\ndemo: interrupted; server stopped, temporary files removed", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    import torch
    import torch.utils.data

    from s3stream import Client, DataLoader, ShardDataset

    # Served from a fresh temporary directory: nginx's workers may run as another user (nobody when
    # started as root), so the directory must be readable by all, whatever --out's parents allow.
    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="s3stream-demo-")))
    root.chmod(0o755)

    # 1. the server
    server = _make_server(root, ttfb_s=args.ttfb_ms / 1000.0, rate=int(args.mbps * 1e6))
    endpoint = stack.enter_context(server)
    _say(1, f"local S3 stand-in (nginx) at {endpoint}: {args.ttfb_ms:g} ms to first byte, "
            f"{args.mbps:g} MB/s per connection, serving {root}")

    # 2. the data
    t = time.perf_counter()
    data = generate_dataset(root, args.images, args.classes, args.image_size, int(args.shard_mb * (1 << 20)),
                            args.seed)
    _say(2, f"dataset: {args.images} JPEGs ({args.classes} classes, {args.image_size}x{args.image_size} px, "
            f"{data['image_bytes'] / 1e6:.1f} MB) as objects under s3://{BUCKET}/images/ and as "
            f"{len(data['shards'])} tar shards under s3://{BUCKET}/shards/ ({time.perf_counter() - t:.1f} s)")

    refresh = getattr(server, "refresh_listing", None)  # a stand-in that lists what it serves
    if callable(refresh):
        refresh()
    _check_served(endpoint, data["keys"][0], root)

    client = Client(endpoint_url=endpoint, region=_REGION, access_key_id=_ACCESS_KEY_ID,
                    secret_access_key=_SECRET_ACCESS_KEY, addressing_style="path")
    shard_uris = [f"s3://{BUCKET}/{s}" for s in data["shards"]]
    t = time.perf_counter()
    write_shard_indexes(root, client, shard_uris)
    if callable(refresh):
        refresh()
    _say(3, f"shard indexes: {len(shard_uris)} sidecars built through the server and stored beside the shards "
            f"({time.perf_counter() - t:.1f} s)")

    steps = math.ceil(args.images / args.batch_size)
    progress = not args.no_progress
    results = []

    # 3. s3stream
    pattern = f"s3://{BUCKET}/shards/train-{{000000..{len(shard_uris) - 1:06d}}}.tar"
    _say(4, f"training 1 epoch with s3stream: ShardDataset({pattern!r}, shuffle=True) + "
            f"s3stream.DataLoader(num_workers={args.workers}, batch_size={args.batch_size})")
    dataset = ShardDataset(pattern, client=client, transform=shard_sample_transform, shuffle=True,
                           seed=args.seed, write_index=False, progress=False)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
    results.append(train_one_epoch("s3stream", loader, steps, args.classes, args.seed, args.lr, progress))
    del loader, dataset

    # 4. boto3
    _say(5, f"training 1 epoch with boto3: map-style Dataset, one get_object per sample, "
            f"torch DataLoader(num_workers={args.workers}, batch_size={args.batch_size}, shuffle=True)")
    b3 = Boto3ImageDataset(endpoint, BUCKET, data["keys"], data["labels"])
    generator = torch.Generator().manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(b3, batch_size=args.batch_size, num_workers=args.workers, shuffle=True,
                                         generator=generator)
    results.append(train_one_epoch("boto3", loader, steps, args.classes, args.seed, args.lr, progress))
    del loader

    print()
    print(f"One epoch, {args.images} images of {args.image_size}x{args.image_size} px, {args.workers} workers, "
          f"batch {args.batch_size}, server: {args.ttfb_ms:g} ms to first byte, {args.mbps:g} MB/s per connection")
    print()
    print_summary(results)
    if args.out:
        out = Path(args.out).resolve()
        out.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(out / BUCKET, ignore_errors=True)
        shutil.copytree(root / BUCKET, out / BUCKET)
        config = {k: v for k, v in vars(args).items() if k not in ("command", "endpoint_url", "region")}
        (out / "results.json").write_text(json.dumps({"config": config, "results": results}, indent=2) + "\n")
        print(f"\nresults: {out / 'results.json'}; dataset (bucket {BUCKET!r}): {out / BUCKET}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python examples/demo.py", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
