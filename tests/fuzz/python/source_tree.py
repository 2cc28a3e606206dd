"""Imports s3stream with its Python modules taken from this checkout (python/s3stream) and only the
native extension (_core) from the installed package, so `make fuzz` exercises the code as it is
now, even before `make install`; once installed, both are the same code anyway."""

from __future__ import annotations

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SOURCE = os.path.join(ROOT, "python", "s3stream")


def import_s3stream():
    installed = importlib.util.find_spec("s3stream")  # finds it without running it
    if installed is None:
        raise SystemExit("the Python fuzz targets need s3stream's native extension: run `make install` first")
    others = [p for p in installed.submodule_search_locations or [] if os.path.realpath(p) != os.path.realpath(SOURCE)]
    spec = importlib.util.spec_from_file_location(
        "s3stream", os.path.join(SOURCE, "__init__.py"), submodule_search_locations=[SOURCE, *others]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["s3stream"] = module
    spec.loader.exec_module(module)
    return module
