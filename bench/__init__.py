"""The peer comparison (``make bench``): data loaders against a realistic local S3.

* :mod:`.server`: nginx (+ Lua) serving a directory with S3's latency model (a time to first
  byte per request, a rate cap per connection), moto behind it for writes;
* :mod:`.data`: the dataset, generated once per parameters (objects, tar shards, MDS, litdata);
* :mod:`.runners`: one loader per library and scenario, each run in its own process
  (:mod:`.run_one`);
* :mod:`.metrics`: samples/s after warm-up, CPU s/GB of the process tree, peak memory, checks;
* :mod:`.ceiling`: the same GETs from wrk at the same concurrency;
* :mod:`.report`: the table, the JSON file and the plot.

Run ``python -m bench --help`` from the repository root; see bench/README.md. Not part of the
installed package: the package holds only the library (its own ``s3stream bench URL`` measures a
user's data).
"""

from __future__ import annotations

from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    from .harness import main as harness_main

    return harness_main(argv)


__all__ = ["main"]
