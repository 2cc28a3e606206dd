"""Stand-in: only the names mosaicml-streaming imports."""

from . import functional  # noqa: F401
