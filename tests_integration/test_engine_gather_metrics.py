"""Accelerate's ``gather_for_metrics`` and ``pad_across_processes`` on the Engine, under real gloo processes.

A dataset that does not divide by the world size makes the distributed sampler repeat samples; the gathered rows
must count every sample exactly once, in the order the sampler drew them."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import python_command, run_processes

SCRIPT = str(Path(__file__).parent / "scripts" / "engine_gather_metrics.py")


def gathered(tmp_path: Path, devices: int, samples: int, batch_size: int) -> dict[str, Any]:
    if "ddp_spawn" not in STRATEGIES:
        pytest.skip("ddp_spawn needs xtrain-strategies")
    out = tmp_path / "out.json"
    with warnings.catch_warnings():
        result = run_processes([python_command(SCRIPT, str(out), "--devices", str(devices), "--samples",
                                               str(samples), "--batch-size", str(batch_size))],
                               timeout=180, cwd=tmp_path)
    assert result.returncodes == [0], result.output
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize(("devices", "samples", "batch_size"), [(2, 101, 8), (3, 10, 4)])
def test_every_sample_is_counted_once_in_the_samplers_order(tmp_path: Path, devices: int, samples: int,
                                                             batch_size: int) -> None:
    got = gathered(tmp_path, devices, samples, batch_size)
    everything = list(range(samples))
    assert got["world"] == devices
    assert got["rank"] == 0  # every rank returned its result; the spawn launcher hands back rank 0's
    assert got["sequential"] == everything  # an unshuffled loader: the dataset's order
    assert got["inner"] == everything  # an evaluation pass inside a training pass
    assert got["outer"] == [0, 1, 2, 3, 4]  # and the training pass's own last batch afterwards
    permutation = torch.randperm(samples, generator=torch.Generator().manual_seed(3)).tolist()
    assert got["shuffled"] == permutation  # the distributed sampler's draw (seed_everything(3), epoch 0)
    shard = -(-samples // devices)  # the padded share of each rank; drop_last drops its partial batch
    assert got["drop_last"] == list(range(min(samples, shard // batch_size * batch_size * devices)))
    assert sorted(got["buckets"]) == everything  # a custom batch sampler: whole batches, rank after rank
    assert got["objects"] == got["objects_auto"] == [f"s{i}" for i in everything]
    padded = -(-samples // devices) * devices - samples  # the samples repeated from the start: 0, 1, ...
    assert got["sums"] == sum(everything) + sum(range(padded))  # batch sums hold real samples: none dropped
    assert got["per_batch"] == [f"rank{r}" for r in range(devices)]
    dtypes, fraction, missing = got["refused"]  # on every rank alike (else the ranks would wait for each other)
    assert "their dtypes differ" in dtypes and "pad_across_processes" in dtypes
    assert "pad_index=-0.5" in fraction and "integer pad_index" in fraction
    assert "dim=1: is not a dimension of the tensor on every rank" in missing
    assert got["accuracy"] == [(samples + 1) // 2, samples]  # even ids are "correct": exact, not over the padding
    ranks = range(devices)
    assert got["after_break"] == list(ranks)  # a pass left by break is not trimmed any more
    assert got["scalars"] == [10 * r for r in ranks]
    assert got["numbers"] == [2.5] * devices
    assert got["ragged"] == [r for r in ranks for _ in range(r + 1)]  # different numbers of rows: rank after rank
    assert got["padded"] == [[[r + 1] * 2] * (r + 1) + [[-1, -1]] * (devices - r - 1) for r in ranks]
    assert "rank 0 (1, 2), rank 1 (2, 2)" in got["mismatch"] and "pad_across_processes" in got["mismatch"]
    assert got["pad_first"] == [[[0] * (devices - r - 1) + [7] * (r + 1)] * 2 for r in ranks]
