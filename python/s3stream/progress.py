"""A progress report on stderr for long waits (a listing of millions of keys): a tqdm bar when tqdm
is installed, else one line refreshed every second.

Shown when asked for (``progress=True``), or by default (``progress=None``) only when stderr is a
terminal; ``progress=False`` shows nothing. Nothing appears for a wait shorter than ``delay_s``.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional


def wanted(progress: Optional[bool]) -> bool:
    """Whether to show progress: as asked, or by default when stderr is a terminal."""
    if progress is not None:
        return bool(progress)
    stream = sys.stderr
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


class Counter:
    """A count of things done (``unit``), total unknown: ``set(n)`` as work goes, ``close()`` at the end."""

    def __init__(self, label: str, unit: str, enabled: bool, delay_s: float = 2.0, every_s: float = 1.0) -> None:
        self.label, self.unit, self.enabled = label, unit, enabled
        self.delay_s, self.every_s = delay_s, every_s
        self.count = 0
        self.start = self.last = time.monotonic()
        self.shown = False
        self._bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                try:
                    self._bar = tqdm(desc=label, unit=f" {unit}", unit_scale=True, file=sys.stderr, delay=delay_s,
                                     dynamic_ncols=True, leave=True)
                except TypeError:  # a tqdm older than 4.62 has no delay: the plain line instead
                    self._bar = None

    def set(self, count: int) -> None:
        if not self.enabled or count == self.count:
            return
        if self._bar is not None:
            self._bar.update(count - self.count)
            self.count = count
            return
        self.count = count
        now = time.monotonic()
        if now - self.start >= self.delay_s and now - self.last >= self.every_s:
            self.last, self.shown = now, True
            self._line(f"{self.label}: {count:,} {self.unit} ...", end="")

    def close(self, summary: Optional[str] = None) -> None:
        """Ends the report; ``summary`` replaces the last line (only where a report was shown)."""
        if not self.enabled:
            return
        if self._bar is not None:
            if summary is not None and self._bar.n and time.monotonic() - self.start >= self.delay_s:
                self._bar.set_postfix_str(summary, refresh=False)
            self._bar.close()
            self._bar = None
        elif self.shown:
            self._line(f"{self.label}: {summary or f'{self.count:,} {self.unit}'}", end="\n")
            self.shown = False

    def _line(self, text: str, end: str) -> None:
        tty = wanted(None)
        print(("\r" + text) if tty else text, end=end if tty else "\n", file=sys.stderr, flush=True)
