"""Optional decoders for common WebDataset extensions, applied as a dataset ``transform``.

The core hands out raw bytes (zero-copy Buffers); decoding is the user's choice, not the engine's::

    ds = s3stream.ShardDataset(urls, transform=s3stream.decode(image="tensor"))

``cls``/``index``/``label`` -> int, ``txt``/``text`` -> str, ``json`` -> object, ``npy`` -> numpy
array, ``jpg``/``jpeg``/``png``/``webp``/``bmp``/``gif`` -> PIL image, or a uint8 CHW tensor with
``image="tensor"``. Other extensions (including ``.gz`` members) stay as Buffers. Works on shard
samples (dicts) and on MapDataset samples (decoded by the object key's extension).
"""

from __future__ import annotations

import io
import json
from typing import Any, Callable

INT_EXTENSIONS = {"cls", "cls2", "index", "label", "id"}
TEXT_EXTENSIONS = {"txt", "text", "transcript"}
IMAGE_EXTENSIONS = {"jpg", "jpeg", "png", "webp", "bmp", "gif", "ppm", "tif", "tiff"}


def _image(kind: str) -> Callable[[Any], Any]:
    try:
        from PIL import Image  # Pillow: only needed when images are decoded
    except ImportError as e:
        raise ImportError("s3stream.decode decodes images with Pillow, which is not installed: "
                          "pip install 's3stream[images]' (or pass image=None to keep image bytes)") from e

    def to_pil(data: Any) -> Any:
        img = Image.open(io.BytesIO(memoryview(data)))
        img.load()
        return img

    if kind == "pil":
        return to_pil

    def to_tensor(data: Any) -> Any:
        import numpy as np
        import torch

        array = np.array(to_pil(data).convert("RGB"))  # a writable copy: torch warns on read-only arrays
        return torch.from_numpy(array).permute(2, 0, 1).contiguous()

    if kind == "tensor":
        return to_tensor
    raise ValueError(f"image must be 'pil', 'tensor' or None, got {kind!r}")


def decode(image: str | None = "pil") -> Callable[[Any], Any]:
    """A transform that decodes the fields it knows and leaves the rest alone.

    For a shard sample (a dict, :class:`s3stream.ShardDataset`) each field is decoded by its name
    (``__*__`` keys are kept as they are). For a :class:`s3stream.MapDataset` sample (a
    :class:`s3stream.Sample`) its ``data`` is decoded by the object key's extension
    (``.../0001.jpg`` -> an image), and the Sample is returned with it.
    """
    image_decoder = _image(image) if image else None

    def npy(data: Any) -> Any:
        import numpy as np

        return np.load(io.BytesIO(memoryview(data)), allow_pickle=False)

    def field(ext: str, value: Any) -> Any:
        ext = ext.lower()
        if ext in INT_EXTENSIONS:
            return int(bytes(value).decode().strip())
        if ext in TEXT_EXTENSIONS:
            return bytes(value).decode("utf-8")
        if ext == "json":
            return json.loads(bytes(value))
        if ext == "npy":
            return npy(value)
        if image_decoder is not None and ext in IMAGE_EXTENSIONS:
            return image_decoder(value)
        return value

    def transform(sample: Any) -> Any:
        if not isinstance(sample, dict) and hasattr(sample, "_replace") and hasattr(sample, "key"):
            name = sample.key.rsplit("/", 1)[-1]
            return sample._replace(data=field(name.rsplit(".", 1)[-1], sample.data)) if "." in name else sample
        return {key: value if key.startswith("__") else field(key.rsplit(".", 1)[-1], value)
                for key, value in sample.items()}

    return transform


__all__ = ["decode"]
