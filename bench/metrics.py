"""What the benchmark measures, and how.

* **samples/s**: samples that reached the training loop (``for batch in loader: pass``) per second
  of wall time, counted from the end of the warm-up (the first ``max(1, num_workers)`` batches:
  every worker has started and delivered) to the last batch (or the time limit of a run).
* **CPU s/GB**: CPU seconds (user + system) of the whole process tree (the loop's process, its
  DataLoader workers, and their children such as ``curl``) over the same window, per GB (10^9) of
  sample payload delivered. Read from ``/proc/<pid>/stat`` (utime + stime + cutime + cstime of every
  live process in the tree) at the two ends of the window: a child that exits inside the window is
  counted through its parent's cutime/cstime.
* **peak memory**: the largest sum, over the process tree, of VmRSS (``/proc/<pid>/status``) and of
  PSS (``/proc/<pid>/smaps_rollup``), sampled every 0.1 s by the process that launched the run.
  RSS counts pages shared by forked workers (torch's libraries, the parent's heap) once per
  worker; PSS splits them, so it is the better total.
* **time to first batch**: from the start of building the dataset to the first batch in the loop.
* **checked**: every sample is verified (index in its payload, payload length, label, and no index
  twice); a complete pass must deliver exactly the dataset's samples.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Dict, Iterable, List, Optional, Sequence

_TICK = os.sysconf("SC_CLK_TCK")


def _children_map() -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree_pids(root: int) -> List[int]:
    kids = _children_map()
    out, todo, seen = [], [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def tree_cpu_seconds(root: Optional[int] = None) -> float:
    """CPU seconds of ``root`` (default: this process) and its live descendants, including the
    CPU of their children that already exited and were waited for."""
    total = 0
    for pid in tree_pids(os.getpid() if root is None else root):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        # fields[0] is the state (field 3): utime, stime, cutime, cstime are fields 14-17
        total += sum(int(x) for x in fields[11:15])
    return total / _TICK


def _status_kb(pid: int, field: bytes) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class MemorySampler:
    """Samples the process tree under ``pid`` every ``interval`` seconds on a thread; keeps the peaks."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self.peak_rss_mb = 0.0
        self.peak_pss_mb = 0.0
        self.peak_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        pids = tree_pids(self.pid)
        rss = sum(_status_kb(p, b"VmRSS:") for p in pids) / 1024
        pss = sum(_pss_kb(p) for p in pids) / 1024
        self.peak_rss_mb = max(self.peak_rss_mb, rss)
        self.peak_pss_mb = max(self.peak_pss_mb, pss)
        self.peak_processes = max(self.peak_processes, len(pids))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


class Checker:
    """Verifies every sample the loop receives against the dataset's definition (data.Spec)."""

    def __init__(self, spec) -> None:
        from .data import HEADER, label

        self.spec = spec
        self._header = HEADER
        self._label = label
        self.seen = bytearray(spec.objects)
        self.samples = 0
        self.bytes = 0
        self.errors: List[str] = []

    def batch(self, batch) -> int:
        """``batch`` is ``(payloads, labels)``: a list of bytes-like objects and a tensor of ints.
        Returns the number of samples in it."""
        payloads, labels = batch
        labels = labels.tolist() if hasattr(labels, "tolist") else list(labels)
        if len(payloads) != len(labels):
            self._error(f"a batch of {len(payloads)} payloads has {len(labels)} labels")
        nbytes = 0
        for p, lab in zip(payloads, labels):
            m = memoryview(p)
            n = m.nbytes
            nbytes += n
            i = int.from_bytes(m[: self._header], "little") if n >= self._header else -1
            if not 0 <= i < self.spec.objects:
                self._error(f"a payload of {n} bytes does not start with a sample index")
                continue
            if n != self.spec.size(i):
                self._error(f"sample {i}: {n} bytes, expected {self.spec.size(i)}")
            if int(lab) != self._label(i):
                self._error(f"sample {i}: label {lab}, expected {self._label(i)}")
            if self.seen[i]:
                self._error(f"sample {i} delivered twice")
            self.seen[i] = 1
        self.samples += len(payloads)
        self.bytes += nbytes
        return len(payloads)

    def _error(self, msg: str) -> None:
        if len(self.errors) < 10:
            self.errors.append(msg)

    def verdict(self, complete: bool) -> Dict[str, object]:
        ok = not self.errors
        if complete and self.samples != self.spec.objects:
            ok = False
            self.errors.append(f"a complete pass delivered {self.samples} samples, expected {self.spec.objects}")
        return {"ok": ok, "complete": complete, "samples": self.samples, "bytes": self.bytes, "errors": self.errors}


def median(values: Sequence[float]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(runs: List[Dict[str, object]], keys: Iterable[str]) -> Dict[str, Optional[float]]:
    """Median of each key over the runs that succeeded."""
    ok = [r for r in runs if r.get("status") == "ok"]
    return {k: median([r[k] for r in ok if r.get(k) is not None]) for k in keys}  # type: ignore[misc]


def now() -> float:
    return time.perf_counter()
