"""Run moto's S3 server as a subprocess on 127.0.0.1 for the integration tests.

The server runs in its own process (not in the pytest process) so that the code under test talks to
it over real sockets, exactly as it would talk to S3, and so that os.fork() in the tests never forks
a server. The kernel ends it when pytest dies (PR_SET_PDEATHSIG), so a crashed or killed test run
leaves nothing behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it goes away."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class MotoServer:
    """One moto server subprocess. `extra_env` is added to its environment (e.g. to enable auth)."""

    def __init__(self, name: str = "moto", extra_env: dict[str, str] | None = None) -> None:
        self.name = name
        self.extra_env = dict(extra_env or {})
        self.port = 0
        self.proc: subprocess.Popen | None = None
        fd, path = tempfile.mkstemp(prefix=f"s3stream-{name}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(path)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "MotoServer":
        last_error = ""
        for _ in range(3):  # the chosen port can be taken between free_port() and bind(): retry
            self.port = free_port()
            env = dict(os.environ)
            env.update(self.extra_env)
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                    preexec_fn=_die_with_parent,
                )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    last_error = f"exited with status {self.proc.returncode}"
                    break
                if self._answers():
                    return self
                time.sleep(0.05)
            else:
                last_error = f"did not answer within {timeout:.0f}s"
                self.stop()
        raise RuntimeError(f"moto server ({self.name}) failed to start: {last_error}\n{self.log_tail()}")

    def _answers(self) -> bool:
        # /moto-api/ is moto's dashboard: it answers without counting as an (authenticated) action.
        try:
            with urllib.request.urlopen(self.url + "/moto-api/", timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def remove_log(self) -> None:
        try:
            self.log_path.unlink()
        except OSError:
            pass

    def reset(self) -> None:
        """Forget all state (buckets, objects, IAM users)."""
        req = urllib.request.Request(self.url + "/moto-api/reset", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=10).read()

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_tail(self, since: int = 0, max_chars: int = 20000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        if len(text) > max_chars:
            text = "...\n" + text[-max_chars:]
        return text

    def __enter__(self) -> "MotoServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.remove_log()
