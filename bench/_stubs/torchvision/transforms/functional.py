"""Stand-in: only the name mosaicml-streaming imports."""


def to_tensor(pic):
    raise RuntimeError("torchvision is a stand-in in this process (make bench): to_tensor is unavailable")
