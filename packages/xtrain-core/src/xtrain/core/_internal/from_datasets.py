"""The dataloaders of ``DataModule.from_datasets``: one per dataset, in the shape the datasets were given."""

from __future__ import annotations

from typing import Any

__all__ = ["datasets_loader"]


def datasets_loader(datasets: Any, *, batch_size: int, num_workers: int, shuffle: bool) -> Any:
    """A ``DataLoader`` per dataset of ``datasets`` (one dataset, or a list, tuple or dict of them); iterable datasets
    are never shuffled. Pinned memory only where CUDA could use it (it only warns on a CPU-only machine)."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    def loader(dataset: Any) -> DataLoader[Any]:
        return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                          shuffle=shuffle and not isinstance(dataset, IterableDataset),
                          pin_memory=torch.cuda.is_available())

    if isinstance(datasets, dict):
        return {key: loader(value) for key, value in datasets.items()}
    if isinstance(datasets, (list, tuple)):
        return type(datasets)(loader(value) for value in datasets)
    return loader(datasets)
