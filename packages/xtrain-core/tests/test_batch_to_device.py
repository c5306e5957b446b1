"""Moving a batch to the strategy's device: a flat batch already there is used as it is; anything else is moved."""

from __future__ import annotations

from typing import NamedTuple

import torch

from xtrain.core.defaults.single_device import SingleDeviceStrategy


class Pair(NamedTuple):
    x: torch.Tensor
    label: str


def _strategy(device: str) -> SingleDeviceStrategy:
    strategy = SingleDeviceStrategy()
    strategy.parallel_devices = [torch.device(device)]
    return strategy


def test_a_flat_batch_already_on_the_device_is_used_as_it_is() -> None:
    x, y = torch.randn(4, 3), torch.arange(4)
    for batch in ([x, y], (x, y)):
        assert _strategy("cpu").batch_to_device(batch) is batch


def test_a_batch_for_another_device_is_moved() -> None:
    batch = [torch.randn(4, 3), torch.arange(4)]
    moved = _strategy("meta").batch_to_device(batch)
    assert moved is not batch
    assert [t.device.type for t in moved] == ["meta", "meta"]
    assert [t.device.type for t in batch] == ["cpu", "cpu"]  # the loader's batch itself is left alone


def test_a_batch_with_other_items_or_nesting_is_walked() -> None:
    x = torch.randn(2)
    pair = _strategy("meta").batch_to_device(Pair(x, "a"))
    assert type(pair) is Pair and pair.label == "a" and pair.x.device.type == "meta"
    nested = _strategy("meta").batch_to_device([[x], {"y": x}])
    assert nested[0][0].device.type == "meta" and nested[1]["y"].device.type == "meta"
    same = [x, "text"]
    assert _strategy("cpu").batch_to_device(same) == same  # nothing to move, only rebuilt
