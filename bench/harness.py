"""``make bench`` (``python -m bench``): data loaders against a realistic local S3, the seeds' method.

For each scenario, number of DataLoader workers and library, R runs, each in a fresh process on the
same data and the same server; samples/s reaching an empty training loop after warm-up (median of
the runs), CPU seconds per GB, peak memory of the process tree, time to first batch, and every
sample checked. Then a table on stdout, ``results.json`` and ``samples_per_s.png`` in ``--out``.
See bench/README.md and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from . import ceiling as ceiling_mod
from . import report
from .data import BUCKET, Dataset, Spec, object_key
from .metrics import MemorySampler, median, summarize
from .runners import LIBRARIES, REQUIRES

SUMMARY_KEYS = ["samples_per_s", "mb_per_s", "cpu_s_per_gb", "first_batch_s", "epoch_samples_per_s",
                "peak_rss_mb", "peak_pss_mb", "window_s", "peak_requests"]
# Which library runs in which scenario.
SCENARIO_LIBRARIES = {
    "random": ["s3stream", "s3stream-plain", "s3torchconnector", "boto3"],
    "shards": ["s3stream", "s3stream-plain", "s3torchconnector", "webdataset", "mosaic", "litdata"],
}
# Libraries that hand each worker whole shards (or chunks): with fewer shards than workers, some idle.
SHARD_PER_WORKER = {"s3torchconnector", "webdataset", "litdata", "mosaic"}


def _ints(s: str) -> List[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def _names(s: str) -> List[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default="random,shards", help="random,shards (default: both)")
    ap.add_argument("--workers", default="0,1,4,8", help="DataLoader num_workers for the random scenario")
    ap.add_argument("--shard-workers", default="1,4,8", help="DataLoader num_workers for the shards scenario")
    ap.add_argument("--shard-sizes", default="16,64,256", help="tar shard sizes in MiB")
    ap.add_argument("--objects", type=int, default=10_000, help="samples (one object each in the random scenario)")
    ap.add_argument("--object-size", type=int, default=100_000, help="mean sample size in bytes (+-10%%)")
    ap.add_argument("--ttfb-ms", type=float, default=20.0, help="server time to first byte per request; 0: loopback")
    ap.add_argument("--mbps", type=float, default=100.0, help="server MB/s (10^6 B) per connection; 0: unlimited")
    ap.add_argument("--runs", type=int, default=3, help="runs per cell (the median is reported)")
    ap.add_argument("--libraries", default=",".join(LIBRARIES), help="subset of " + ",".join(LIBRARIES))
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-seconds", type=float, default=20.0,
                    help="a run stops this long after its warm-up even if the pass is not complete (0: never)")
    ap.add_argument("--ceiling-seconds", type=float, default=5.0, help="duration of each wrk ceiling measurement")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the wrk ceiling")
    ap.add_argument("--nginx-workers", type=int, default=2, help="nginx worker processes")
    ap.add_argument("--cache-dir", default=None, help="where the dataset is generated (default ~/.cache/s3stream/bench)")
    ap.add_argument("--out", default=None, help="results directory (default bench/results/<timestamp>)")
    ap.add_argument("--package", default=None,
                    help="directory holding the s3stream package to measure (default: the importable one); "
                         "for A/B runs of two builds")
    ap.add_argument("--run-timeout", type=float, default=None, help="hard limit per run in seconds")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 500 samples of 16 KB, 1 MiB shards, workers 0,2 / 1,2, 1 run, short ceilings")
    args = ap.parse_args(argv)
    if args.quick:
        given = set(a.split("=", 1)[0] for a in (argv or sys.argv[1:]) if a.startswith("--"))
        quick = {"--objects": ("objects", 500), "--object-size": ("object_size", 16_000),
                 "--shard-sizes": ("shard_sizes", "1"), "--workers": ("workers", "0,2"),
                 "--shard-workers": ("shard_workers", "1,2"), "--runs": ("runs", 1),
                 "--ceiling-seconds": ("ceiling_seconds", 1.0), "--max-seconds": ("max_seconds", 10.0)}
        for flag, (dest, value) in quick.items():
            if flag not in given:
                setattr(args, dest, value)
    args.scenarios = _names(args.scenarios)
    args.workers = _ints(args.workers)
    args.shard_workers = _ints(args.shard_workers)
    args.shard_sizes = _ints(args.shard_sizes)
    args.libraries = _names(args.libraries)
    for s in args.scenarios:
        if s not in SCENARIO_LIBRARIES:
            ap.error(f"unknown scenario {s!r} (random, shards)")
    for lib in args.libraries:
        if lib not in LIBRARIES:
            ap.error(f"unknown library {lib!r} ({', '.join(LIBRARIES)})")
    if args.out is None:
        args.out = os.path.join("bench", "results", datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    return args


def _importable(module: str, parent: Optional[str] = None) -> Optional[str]:
    """None if ``module`` can be imported in a fresh process, else the reason."""
    code = f"import {module}" if module != "streaming" else (
        "import bench.data as d; d.import_streaming()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_child_env(None, parent))
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or ["failed to import"])[-1]
    return f"{module} cannot be imported: {last}"


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # holds the `bench` package


def package_parent(package: Optional[str] = None) -> str:
    """The directory holding the s3stream package to measure: ``package`` (``--package``), or the
    one this Python imports (installed, or built into the source tree)."""
    if package:
        if not os.path.isdir(os.path.join(package, "s3stream")):
            raise SystemExit(f"--package {package}: no s3stream package in that directory")
        return os.path.abspath(package)
    import importlib.util

    spec = importlib.util.find_spec("s3stream")
    if spec is None or spec.origin is None:
        raise SystemExit("s3stream is not importable: build and install it first (make install)")
    return os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))


def snapshot_package(dest: str, package: Optional[str] = None) -> str:
    """Copies the s3stream package (with its native module) to ``dest``; returns the directory to
    put on PYTHONPATH. Runs import this copy: rebuilding the extension in place while a long bench
    runs then neither crashes the runs nor mixes two engines in one table."""
    src = os.path.join(package_parent(package), "s3stream")
    shutil.copytree(src, os.path.join(dest, "s3stream"), ignore=shutil.ignore_patterns("__pycache__", "*.tmp"))
    return dest


def _core_digest(parent: str) -> Optional[str]:
    import glob
    import hashlib

    for path in glob.glob(os.path.join(parent, "s3stream", "_core*.so")):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    return None


def _child_env(endpoint: Optional[str], parent: Optional[str] = None) -> Dict[str, str]:
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("AWS_") or name in ("S3_ENDPOINT_URL",):
            del env[name]
    env.update({
        "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1",
    })
    empty = os.path.join(tempfile.gettempdir(), "s3stream-bench-no-aws-config")
    env["AWS_CONFIG_FILE"] = os.path.join(empty, "config")
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.path.join(empty, "credentials")
    if endpoint:
        env["S3_ENDPOINT_URL"] = endpoint  # mosaicml-streaming's way to name an S3-compatible endpoint
    # The measured package first, then this harness (`python -m bench.run_one`), then the rest.
    paths = [parent or package_parent(), REPO_ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def machine() -> Dict[str, Any]:
    info: Dict[str, Any] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["memory_gb"] = round(int(f.readline().split()[1]) / 1e6, 1)
    except OSError:
        pass
    from importlib import metadata

    versions = {}
    for dist in ("s3stream", "torch", "s3torchconnector", "boto3", "webdataset", "mosaicml-streaming", "litdata"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    try:
        versions["nginx"] = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip().split("/")[-1]
    except OSError:
        pass
    info["versions"] = versions
    return info


class Harness:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.spec = Spec(objects=args.objects, object_size=args.object_size)
        self.log = lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True)
        self.data = Dataset(self.spec, args.cache_dir, log=self.log)
        self.skip_reason: Dict[str, Optional[str]] = {}
        self.package_dir: Optional[str] = None  # where runs import s3stream from (a snapshot)
        self.server: Any = None  # the LocalS3 the runs read from (set in _run)

    # -- the plan ------------------------------------------------------------------------------------
    def libraries_for(self, scenario: str) -> List[str]:
        return [lib for lib in SCENARIO_LIBRARIES[scenario] if lib in self.args.libraries]

    def panels(self) -> List[Dict[str, Any]]:
        out = []
        if "random" in self.args.scenarios and self.libraries_for("random"):
            for w in self.args.workers:
                out.append({"scenario": "random", "shard_mb": None, "workers": w, "panel": "random"})
        if "shards" in self.args.scenarios and self.libraries_for("shards"):
            for s in self.args.shard_sizes:
                for w in self.args.shard_workers:
                    out.append({"scenario": "shards", "shard_mb": s, "workers": w, "panel": f"shards {s} MB"})
        return out

    def prepare(self) -> None:
        libs = set(self.libraries_for("shards")) if "shards" in self.args.scenarios else set()
        for lib in set(self.args.libraries):
            self.skip_reason[lib] = _importable(REQUIRES[lib], self.package_dir)
            if self.skip_reason[lib]:
                self.log(f"skipping {lib}: {self.skip_reason[lib]}")
        sizes = self.args.shard_sizes
        self.data.ensure(
            random="random" in self.args.scenarios and bool(self.libraries_for("random")),
            shard_sizes=sizes if libs & {"s3stream", "s3stream-plain", "s3torchconnector", "webdataset"} else (),
            mds=sizes if "mosaic" in libs and not self.skip_reason.get("mosaic") else (),
            litdata=sizes if "litdata" in libs and not self.skip_reason.get("litdata") else (),
        )

    def parts(self) -> List[str]:
        parts = []
        for p in ["random"] + [f"{fmt}/{s}MB" for fmt in ("shards", "mds", "litdata") for s in self.args.shard_sizes]:
            if os.path.isdir(self.data.part_dir(p)):
                parts.append(p)
        return parts

    def shard_count(self, lib: str, shard_mb: int) -> int:
        fmt = {"mosaic": "mds", "litdata": "litdata"}.get(lib, "shards")
        d = self.data.part_dir(f"{fmt}/{shard_mb}MB")
        if not os.path.isdir(d):
            return 0
        ext = {"mds": ".mds", "litdata": ".bin", "shards": ".tar"}[fmt]
        return sum(1 for n in os.listdir(d) if n.endswith(ext))

    # -- one run -------------------------------------------------------------------------------------
    def run_config(self, endpoint: str, panel: Dict[str, Any], lib: str, run: int, tmp: str) -> Dict[str, Any]:
        cfg: Dict[str, Any] = {
            "library": lib, "scenario": panel["scenario"], "workers": panel["workers"],
            "batch_size": self.args.batch_size, "endpoint": endpoint,
            "spec": {"objects": self.spec.objects, "object_size": self.spec.object_size, "seed": self.spec.seed},
            "seed": run, "tmp": tmp, "max_seconds": self.args.max_seconds, "shard_mb": panel["shard_mb"],
        }
        if panel["scenario"] == "random":
            cfg["uris"] = [f"s3://{BUCKET}/{object_key(i)}" for i in range(self.spec.objects)]
        else:
            keys = self.data.shard_keys(panel["shard_mb"])
            cfg["keys"] = keys
            cfg["uris"] = [f"s3://{BUCKET}/{k}" for k in keys]
        return cfg

    def run_once(self, endpoint: str, panel: Dict[str, Any], lib: str, run: int) -> Dict[str, Any]:
        tmp = tempfile.mkdtemp(prefix=f"s3stream-bench-{lib}-")
        try:
            cfg = self.run_config(endpoint, panel, lib, run, tmp)
            cfg_path = os.path.join(tmp, "config.json")
            with open(cfg_path, "w") as f:
                json.dump(cfg, f)
            out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
            load_before = _loadavg()
            self.server.wait_idle()  # the previous run's (or wrk's) requests are not this one's
            self.server.inflight_peak(reset=True)
            limit = self.args.run_timeout or (4 * (self.args.max_seconds or 300) + 180)
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                proc = subprocess.Popen([sys.executable, "-m", "bench.run_one", "--json", "@" + cfg_path],
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=tmp,
                                        env=_child_env(endpoint, self.package_dir), start_new_session=True)
                timed_out = False
                with MemorySampler(proc.pid) as mem:
                    try:
                        proc.wait(timeout=limit)
                    except subprocess.TimeoutExpired:
                        timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # leftovers (workers, curl) of this run only
                except ProcessLookupError:
                    pass
                proc.wait()
            result: Dict[str, Any] = {}
            with open(out_path, "rb") as f:
                for line in f.read().decode(errors="replace").splitlines():
                    if line.startswith("S3STREAM_BENCH_RESULT "):
                        result = json.loads(line[len("S3STREAM_BENCH_RESULT "):])
            if not result:
                with open(err_path, "rb") as f:
                    tail = f.read()[-3000:].decode(errors="replace")
                reason = f"timed out after {limit:.0f}s" if timed_out else f"exited with status {proc.returncode}"
                result = {"status": "failed", "reason": f"{reason}: {tail.strip()[-1500:]}"}
            result["loadavg_after"] = _loadavg()
            result["loadavg_before"] = load_before
            result["peak_rss_mb"] = mem.peak_rss_mb
            result["peak_pss_mb"] = mem.peak_pss_mb
            result["peak_processes"] = mem.peak_processes
            result["peak_requests"] = self.server.inflight_peak(reset=False)  # the next run resets
            result["run"] = run
            return result
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- the ceiling -----------------------------------------------------------------------------------
    def ceiling_once(self, endpoint: str, panel: Dict[str, Any], measured: Optional[int]) -> Dict[str, Any]:
        """One wrk measurement for the panel's scenario (see ceiling.py) with as many connections as
        s3stream kept requests in flight in the same run (``measured``: the server's count), or, when
        that was not measured, as many as its readers are sized for."""
        w = max(1, panel["workers"])
        if panel["scenario"] == "random":
            targets = ceiling_mod.object_targets([object_key(i) for i in range(self.spec.objects)], BUCKET)
            conns = 64 * w
            samples_per_request = 1.0
        else:
            keys = self.data.shard_keys(panel["shard_mb"])
            offsets = {}
            for k in keys:
                try:
                    with open(os.path.join(self.data.bucket_dir, k + ".idx.json")) as f:
                        offsets[k] = json.load(f)["offsets"]
                except OSError:
                    return {"status": "skipped", "reason": "no shard indexes"}
            targets = ceiling_mod.shard_targets(keys, offsets, BUCKET, self.args.batch_size)
            conns = 8 * w
            samples_per_request = self.spec.objects / len(targets)
        if measured:
            conns = measured
        r = ceiling_mod.run_wrk(endpoint, targets, conns, self.args.ceiling_seconds)
        if r.get("requests_per_s"):
            r["samples_per_s"] = r["requests_per_s"] * samples_per_request
        r["connections_from"] = "s3stream's peak in flight" if measured else "default"
        return r

    @staticmethod
    def summarize_ceiling(panel: Dict[str, Any], samples: List[Dict[str, Any]]) -> Dict[str, Any]:
        ok = [r for r in samples if r.get("samples_per_s")]
        out: Dict[str, Any] = {**key_dict(panel), "samples": samples}
        if not ok:
            first = samples[0] if samples else {}
            out.update(status=first.get("status", "skipped"), reason=first.get("reason", ""))
            return out
        out.update(status="ok" if all(r["status"] == "ok" for r in ok) else "errors",
                   samples_per_s=median([r["samples_per_s"] for r in ok]),
                   requests_per_s=median([r["requests_per_s"] for r in ok]),
                   mb_per_s=median([r["mb_per_s"] for r in ok]),
                   connections=int(round(median([r["connections"] for r in ok]))),
                   connections_from=ok[0].get("connections_from", "default"), command=ok[0]["command"])
        return out

    # -- the whole bench -----------------------------------------------------------------------------
    def run(self) -> Dict[str, Any]:
        args = self.args
        os.makedirs(args.out, exist_ok=True)
        t_start = time.time()
        snapshot = tempfile.mkdtemp(prefix="s3stream-bench-pkg-")
        try:
            self.package_dir = snapshot_package(snapshot, self.args.package)
            return self._run(t_start)
        finally:
            shutil.rmtree(snapshot, ignore_errors=True)

    def _run(self, t_start: float) -> Dict[str, Any]:
        from .server import LocalS3

        args = self.args
        self.prepare()
        results: Dict[str, Any] = {
            "config": {
                "objects": self.spec.objects, "object_size": self.spec.object_size, "ttfb_ms": args.ttfb_ms,
                "mbps": args.mbps, "runs": args.runs, "batch_size": args.batch_size, "max_seconds": args.max_seconds,
                "scenarios": args.scenarios, "workers": args.workers, "shard_workers": args.shard_workers,
                "shard_sizes": args.shard_sizes, "libraries": args.libraries,
                "command": "python -m bench " + " ".join(sys.argv[1:] if self.argv is None else self.argv),
                "dataset": self.data.dir,
            },
            "machine": {**machine(), "s3stream_core_sha256": _core_digest(self.package_dir or package_parent(self.args.package))},
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "cells": [],
            "ceilings": [],
        }
        rate = int(args.mbps * 1e6)
        self.server = LocalS3(self.data.root, ttfb_s=args.ttfb_ms / 1000, rate=rate, workers=args.nginx_workers)
        with self.server as endpoint:
            self.log(f"server {endpoint}: TTFB {args.ttfb_ms:g} ms, {args.mbps:g} MB/s per connection, dataset {self.data.dir}")
            if "shards" in args.scenarios:
                for s in args.shard_sizes:
                    if os.path.isdir(self.data.part_dir(f"shards/{s}MB")):
                        built = self.data.ensure_indexes(endpoint, s)
                        if built:
                            self.log(f"indexed {built} shards of {s} MiB")
            gb = self.data.warm(self.parts())
            self.log(f"page cache warmed ({gb:.1f} GB)")
            results["cells"], results["ceilings"] = self.run_cells(endpoint)
        results["elapsed_s"] = time.time() - t_start
        return results

    argv: Optional[List[str]] = None

    def _save_partial(self, cells: Dict[tuple, Dict[str, Any]], ceilings: List[Dict[str, Any]]) -> None:
        """The runs so far, in case the bench is interrupted (the complete results replace it)."""
        try:
            report.write_json({"partial": True, "cells": list(cells.values()), "ceilings": ceilings},
                              os.path.join(self.args.out, "results.partial.json"))
        except OSError:
            pass

    def run_cells(self, endpoint: str) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
        args = self.args
        plan = []
        for panel in self.panels():
            for lib in self.libraries_for(panel["scenario"]):
                plan.append((panel, lib))
        cells: Dict[tuple, Dict[str, Any]] = {}
        for panel, lib in plan:
            cell = {**key_dict(panel), "library": lib, "runs": []}
            if panel["scenario"] == "shards" and lib in SHARD_PER_WORKER:
                n = self.shard_count(lib, panel["shard_mb"])
                if 0 < n < panel["workers"]:
                    cell["note"] = f"{n} shards for {panel['workers']} workers"
            cells[(panel["panel"], panel["workers"], lib)] = cell
        total = len(plan) * args.runs
        bar = _progress(total, disable=args.no_progress)
        ceilings: List[Dict[str, Any]] = []
        try:
            # Libraries (and the ceiling) interleaved within each panel and run, so drift on a shared
            # machine hits all alike.
            for panel in self.panels():
                ceiling_samples: List[Dict[str, Any]] = []
                for run in range(args.runs):
                    for lib in self.libraries_for(panel["scenario"]):
                        cell = cells[(panel["panel"], panel["workers"], lib)]
                        bar.set_postfix_str(f"{panel['panel']}, {panel['workers']} workers, {lib}, run {run + 1}")
                        if self.skip_reason.get(lib):
                            r = {"status": "skipped", "reason": self.skip_reason[lib], "run": run}
                        elif cell["runs"] and cell["runs"][-1].get("status") == "skipped":
                            r = dict(cell["runs"][-1], run=run)
                        else:
                            r = self.run_once(endpoint, panel, lib, run)
                        cell["runs"].append(r)
                        if r.get("status") not in ("ok", "skipped"):
                            bar.write(f"[bench] {panel['panel']}, {panel['workers']} workers, {lib}, run {run + 1}: "
                                      f"{r.get('status')}: {str(r.get('reason') or r.get('check', {}).get('errors'))[:300]}")
                        bar.update(1)
                        self._save_partial(cells, ceilings)
                    if not args.no_ceiling:
                        bar.set_postfix_str(f"{panel['panel']}, {panel['workers']} workers, ceiling (wrk), run {run + 1}")
                        mine = cells.get((panel["panel"], panel["workers"], "s3stream"), {}).get("runs", [])
                        measured = mine[-1].get("peak_requests") if mine and mine[-1].get("status") == "ok" else None
                        ceiling_samples.append(self.ceiling_once(endpoint, panel, measured))
                if ceiling_samples:
                    ceilings.append(self.summarize_ceiling(panel, ceiling_samples))
        finally:
            bar.close()
        out = []
        for cell in cells.values():
            runs = cell["runs"]
            ok = [r for r in runs if r.get("status") == "ok"]
            cell["median"] = summarize(runs, SUMMARY_KEYS)
            if ok:
                cell["status"] = "ok"
                cell["complete"] = all(r.get("check", {}).get("complete", True) for r in ok)
                bad = [r for r in runs if r.get("status") != "ok"]
                if bad:
                    cell["note"] = (cell.get("note", "") + f"; {len(bad)}/{len(runs)} runs failed").lstrip("; ")
            elif runs and all(r.get("status") == "skipped" for r in runs):
                cell["status"] = "skipped"
                cell["reason"] = runs[0].get("reason", "")
            else:
                cell["status"] = "failed" if all(r.get("status") != "check_failed" for r in runs) else "check_failed"
                first = next((r for r in runs if r.get("status") != "ok"), {})
                cell["reason"] = str(first.get("reason") or first.get("check", {}).get("errors"))[:500]
            out.append(cell)
        return out, ceilings


def _loadavg() -> Optional[float]:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return None


def key_dict(panel: Dict[str, Any]) -> Dict[str, Any]:
    return {"panel": panel["panel"], "scenario": panel["scenario"], "shard_mb": panel["shard_mb"],
            "workers": panel["workers"]}


class _NoBar:
    def set_postfix_str(self, s: str) -> None:
        pass

    def write(self, s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, disable: bool):
    if disable:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc="bench runs", unit="run", dynamic_ncols=True, file=sys.stderr)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    harness = Harness(args)
    harness.argv = list(argv) if argv is not None else None
    results = harness.run()
    json_path = os.path.join(args.out, "results.json")
    png_path = os.path.join(args.out, "samples_per_s.png")
    md_path = os.path.join(args.out, "table.md")
    text = report.table(results)
    report.write_json(results, json_path)
    try:
        os.remove(os.path.join(args.out, "results.partial.json"))
    except OSError:
        pass
    with open(md_path, "w") as f:
        f.write(text)
    why = report.plot(results, png_path)
    print(text)
    print(f"results: {json_path}, {md_path}" + (f", {png_path}" if why is None else f" (no plot: {why})"))
    bad = [c for c in results["cells"] if c["status"] == "check_failed"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
