"""The results: a table on stdout, a JSON file, and a PNG plot (samples/s by num_workers)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

# Line colours and order: s3stream first and bold, then peers.
COLORS = {
    "s3stream": "#d62728",
    "s3stream-plain": "#e377c2",  # s3stream's datasets in torch's own DataLoader
    "s3torchconnector": "#1f77b4",
    "boto3": "#7f7f7f",
    "webdataset": "#2ca02c",
    "mosaic": "#9467bd",
    "litdata": "#ff7f0e",
}


def panel_key(cell: Dict[str, Any]) -> str:
    return "random" if cell["scenario"] == "random" else f"shards {cell['shard_mb']} MB"


def _clean(text: Any, limit: int = 160) -> str:
    """One line, no table separators."""
    return " ".join(str(text or "").split()).replace("|", "/")[:limit]


def _fmt(v: Optional[float], digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def table(results: Dict[str, Any]) -> str:
    """Plain-text table (also valid Markdown), one block per panel."""
    cfg = results["config"]
    lines: List[str] = []
    panels: Dict[str, List[Dict[str, Any]]] = {}
    for cell in results["cells"]:
        panels.setdefault(panel_key(cell), []).append(cell)
    ceilings = {(c["panel"], c["workers"]): c for c in results.get("ceilings", [])}
    for panel, cells in panels.items():
        lines.append("")
        lines.append(f"### {panel}: {cfg['objects']:,} samples of ~{cfg['object_size'] // 1000} KB, TTFB {cfg['ttfb_ms']:g} ms, "
                     f"{cfg['mbps']:g} MB/s per connection, median of {cfg['runs']} runs")
        lines.append("")
        lines.append("| library | workers | samples/s | MB/s | CPU s/GB | peak PSS MB | peak RSS MB | first batch s | "
                     "epoch samples/s | GETs in flight | check | note |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
        order = sorted(cells, key=lambda c: (c["workers"], _lib_rank(c["library"])))
        last_workers = None
        for c in order:
            if last_workers is not None and c["workers"] != last_workers:
                ceil = ceilings.get((panel, last_workers))
                if ceil:
                    lines.append(_ceiling_row(ceil))
            last_workers = c["workers"]
            m = c.get("median") or {}
            if c["status"] in ("skipped", "failed"):
                lines.append(f"| {c['library']} | {c['workers']} | {c['status']} | | | | | | | | | {_clean(c.get('reason'))} |")
                continue
            check = "ok" if c["status"] == "ok" else c["status"]
            if c["status"] == "ok" and not c.get("complete", True):
                check = "ok (partial)"
            lines.append(
                f"| {c['library']} | {c['workers']} | {_fmt(m.get('samples_per_s'))} | {_fmt(m.get('mb_per_s'))} | "
                f"{_fmt(m.get('cpu_s_per_gb'), 2)} | {_fmt(m.get('peak_pss_mb'))} | {_fmt(m.get('peak_rss_mb'))} | "
                f"{_fmt(m.get('first_batch_s'), 2)} | {_fmt(m.get('epoch_samples_per_s'))} | {_fmt(m.get('peak_requests'))} | "
                f"{check} | {c.get('note', '')} |")
        if last_workers is not None and (panel, last_workers) in ceilings:
            lines.append(_ceiling_row(ceilings[(panel, last_workers)]))
    ratios = ratio_lines(results)
    if ratios:
        lines.append("")
        lines.append("### s3stream relative to peers and to the ceiling (samples/s)")
        lines.append("")
        lines.extend(ratios)
    return "\n".join(lines) + "\n"


def _ceiling_row(c: Dict[str, Any]) -> str:
    if c.get("status") not in ("ok", "errors"):
        return f"| ceiling (wrk) | {c['workers']} | {c.get('status')} | | | | | | | | | {_clean(c.get('reason'), 80)} |"
    source = " (s3stream's peak)" if c.get("connections_from", "").startswith("s3stream") else ""
    return (f"| *ceiling (wrk)* | {c['workers']} | *{_fmt(c.get('samples_per_s'))}* | *{_fmt(c.get('mb_per_s'))}* | | | | | | "
            f"*{c['connections']}* | | {c['connections']} connections{source} |")


def _lib_rank(lib: str) -> int:
    order = list(COLORS)
    return order.index(lib) if lib in order else len(order)


def ratio_lines(results: Dict[str, Any]) -> List[str]:
    """``s3stream / peer`` and ``s3stream / ceiling`` at each (panel, workers)."""
    by: Dict[Tuple[str, int], Dict[str, float]] = {}
    for c in results["cells"]:
        v = (c.get("median") or {}).get("samples_per_s")
        if c["status"] == "ok" and v:
            by.setdefault((panel_key(c), c["workers"]), {})[c["library"]] = v
    ceil = {(c["panel"], c["workers"]): c.get("samples_per_s") for c in results.get("ceilings", [])
            if c.get("status") in ("ok", "errors")}
    peers = [lib for lib in COLORS if lib != "s3stream"]
    rows = []
    header = "| panel | workers | " + " | ".join(f"vs {p}" for p in peers) + " | of ceiling |"
    rows.append(header)
    rows.append("|---|---:|" + "---:|" * (len(peers) + 1))
    any_row = False
    for (panel, w), libs in sorted(by.items(), key=lambda kv: (kv[0][0] != "random", kv[0][0], kv[0][1])):
        s = libs.get("s3stream")
        if not s:
            continue
        cells = [f"{s / libs[p]:.2f}x" if p in libs else "-" for p in peers]
        c = ceil.get((panel, w))
        rows.append(f"| {panel} | {w} | " + " | ".join(cells) + f" | {s / c:.0%} |" if c else
                    f"| {panel} | {w} | " + " | ".join(cells) + " | - |")
        any_row = True
    return rows if any_row else []


def write_json(results: Dict[str, Any], path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1, sort_keys=False, default=str)
    os.replace(tmp, path)


def plot(results: Dict[str, Any], path: str) -> Optional[str]:
    """samples/s by num_workers, one line per library, one panel per scenario / shard size, the
    ceiling dashed. Returns None when matplotlib is missing (the reason is printed by the caller)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed"
    panels: Dict[str, List[Dict[str, Any]]] = {}
    for cell in results["cells"]:
        panels.setdefault(panel_key(cell), []).append(cell)
    if not panels:
        return "no cells"
    n = len(panels)
    cols = min(n, 2)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.6 * rows), squeeze=False)
    cfg = results["config"]
    for ax, (panel, cells) in zip(axes.flat, panels.items()):
        libs = sorted({c["library"] for c in cells}, key=_lib_rank)
        all_workers = sorted({c["workers"] for c in cells})
        for lib in libs:
            pts = sorted((c["workers"], (c.get("median") or {}).get("samples_per_s")) for c in cells
                         if c["library"] == lib and c["status"] == "ok")
            pts = [(w, v) for w, v in pts if v]
            if not pts:
                continue
            ax.plot([w for w, _ in pts], [v for _, v in pts], marker="o", label=lib, color=COLORS.get(lib),
                    linewidth=2.6 if lib == "s3stream" else 1.6)
        ceil = sorted((c["workers"], c.get("samples_per_s")) for c in results.get("ceilings", [])
                      if c["panel"] == panel and c.get("samples_per_s"))
        if ceil:
            ax.plot([w for w, _ in ceil], [v for _, v in ceil], linestyle="--", color="black", linewidth=1.2,
                    label="ceiling (wrk)")
        ax.set_title(panel)
        ax.set_xlabel("DataLoader num_workers")
        ax.set_ylabel("samples/s (after warm-up)")
        ax.set_xticks(all_workers)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"{cfg['objects']:,} samples of ~{cfg['object_size'] // 1000} KB; server TTFB {cfg['ttfb_ms']:g} ms, "
                 f"{cfg['mbps']:g} MB/s per connection; batch {cfg['batch_size']}; median of {cfg['runs']} runs",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
