"""Stand-in: only the name mosaicml-streaming imports."""

import torch.utils.data


class VisionDataset(torch.utils.data.Dataset):
    def __init__(self, root=None, transforms=None, transform=None, target_transform=None):
        self.root, self.transform, self.target_transform = root, transform, target_transform
        self.transforms = transforms


class CIFAR10(VisionDataset):
    def __init__(self, *args, **kwargs):
        raise RuntimeError("torchvision is a stand-in in this process (make bench): CIFAR10 is unavailable")
