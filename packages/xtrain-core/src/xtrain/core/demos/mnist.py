"""The MNIST digits read from the standard IDX files, and a DataModule around them, for examples and tests."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, random_split
from typing_extensions import override

from xtrain.core.datamodule import DataModule
from xtrain.core.demos._download import ensure
from xtrain.core.errors import CheckpointError

__all__ = ["MNIST", "MNISTDataModule"]

_MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_FILES = {True: ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
          False: ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
_IMAGES, _LABELS = 2051, 2049


def read_idx(path: Path, magic: int) -> Tensor:
    """The uint8 array of an IDX file (gzipped or not); refuses a file whose header does not match its kind."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    dims = magic - 2048
    header = 4 + 4 * dims
    found = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else -1
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)] if len(raw) >= header else []
    if found != magic or len(raw) != header + int(torch.tensor(shape).prod()):
        raise CheckpointError(f"{path}: not an MNIST IDX file of {'images' if dims == 3 else 'labels'} (magic "
                              f"{found}, expected {magic}, or truncated). Fix: delete it and download it again.")
    return torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8).view(shape)


class MNIST(Dataset[tuple[Any, int]]):
    """MNIST (60,000 training or 10,000 test images of 28x28 digits) from ``root/MNIST/raw``.

    The files are the standard IDX files (the layout torchvision uses, so its downloads are reused); with
    ``download=True`` the missing ones are fetched. Without ``transform`` an item is a ``(1, 28, 28)`` float tensor
    in [0, 1] (standardized with ``normalize=(mean, std)``); with one, the transform gets a PIL image (like torchvision's), or the uint8 tensor if Pillow is absent.
    """

    def __init__(self, root: str | Path = "./data", train: bool = True, download: bool = True,
                 transform: Callable[[Any], Any] | None = None,
                 target_transform: Callable[[int], Any] | None = None, *,
                 normalize: tuple[float, float] | None = None) -> None:
        raw = Path(root) / "MNIST" / "raw"
        images, labels = (ensure(raw / name, _MIRROR + name, download=download, argument="root")
                          for name in _FILES[train])
        self.root, self.train = Path(root), train
        self.transform, self.target_transform, self.normalize = transform, target_transform, normalize
        self.data = read_idx(images, _IMAGES)
        self.targets = read_idx(labels, _LABELS).long()
        if len(self.data) != len(self.targets):
            raise CheckpointError(f"{images}: {len(self.data)} images but {labels} has {len(self.targets)} labels. "
                                  f"Fix: delete both and download them again.")

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image: Any = self.data[index]
        target: Any = int(self.targets[index])
        if self.transform is None:
            image = image.unsqueeze(0).float() / 255.0
            if self.normalize is not None:
                image = (image - self.normalize[0]) / self.normalize[1]
        else:
            try:
                from PIL import Image
            except ImportError:
                pass
            else:
                image = Image.fromarray(image.numpy(), mode="L")
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


class MNISTDataModule(DataModule):
    """MNIST split into training and validation (the last ``val_split`` training images), and the test set."""

    def __init__(self, data_dir: str | Path = ".", val_split: int = 5000, num_workers: int = 0,
                 normalize: bool = False, seed: int = 42, batch_size: int = 32) -> None:
        super().__init__()
        self.data_dir, self.val_split, self.num_workers = data_dir, val_split, num_workers
        self.normalize, self.seed, self.batch_size = normalize, seed, batch_size
        self.dataset_train: Dataset[Any] | None = None
        self.dataset_val: Dataset[Any] | None = None

    @property
    def num_classes(self) -> int:
        return 10

    def _dataset(self, train: bool) -> MNIST:
        return MNIST(self.data_dir, train=train, download=True, normalize=(0.1307, 0.3081) if self.normalize else None)

    @override
    def prepare_data(self) -> None:
        self._dataset(True)
        self._dataset(False)

    @override
    def setup(self, stage: str) -> None:
        full = self._dataset(True)
        split = [len(full) - self.val_split, self.val_split]
        self.dataset_train, self.dataset_val = random_split(full, split, torch.Generator().manual_seed(self.seed))

    def _loader(self, train: bool) -> DataLoader[Any]:
        if self.dataset_train is None or self.dataset_val is None:
            self.setup("fit")
        dataset = self.dataset_train if train else self.dataset_val
        assert dataset is not None
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=train, num_workers=self.num_workers,
                          drop_last=train)

    @override
    def train_dataloader(self) -> DataLoader[Any]:
        return self._loader(True)

    @override
    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader(False)

    @override
    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self._dataset(False), batch_size=self.batch_size, num_workers=self.num_workers)
