"""A minimal stand-in for torchvision, for benchmark processes only.

mosaicml-streaming imports ``torchvision.datasets.VisionDataset`` and
``torchvision.transforms.functional.to_tensor`` when it is imported (for its vision datasets, which
the benchmark does not use), and torchvision cannot be installed beside the pinned torch here. The
benchmark puts this package on ``sys.path`` only in its own processes, and only when the real
torchvision is not importable. Nothing in it is used by the code being measured.
"""

from . import datasets, transforms  # noqa: F401

__version__ = "0.0.0+s3stream-bench-stub"
