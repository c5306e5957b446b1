"""Bagua's algorithms on plain torch.distributed, for real on 2 gloo processes: each converges on the tiny model,
every rank ends with the same model, and each sends what it promises (checked from its byte counter).

The counters are what each rank handed to collectives; ``tools/bench/compression.py`` also measures the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from strategies_helpers import Run, assert_close, quiet_trainer
from xtrain.core import ConfigError
from xtrain.core.testing import StrategyConformance
from xtrain.strategies._internal.averaging import shift_peers
from xtrain.strategies._internal.comm_hooks import dequantize, quantize
from xtrain.strategies.async_averaging import AsyncModelAveragingStrategy, _round_message
from xtrain.strategies.averaging import LocalSGDStrategy
from xtrain.strategies.compression import CompressedDDPStrategy

STEPS = 40
SETTINGS: dict[str, Any] = {"devices": 2, "max_steps": STEPS, "batch_size": 4, "shuffle": True, "samples": 256}
PARAMS = 16 * 32 + 32 + 32 * 4 + 4  # TinyClassifier: one DDP bucket of 676 float32 values
# How far from DDP's weights each may end after 40 steps (compressed gradients stay close; replicas drift).
CLOSE_TO_DDP = {"ddp_fp16_compress": 1e-2, "ddp_bf16_compress": 5e-2, "ddp_int8_compress": 5e-2,
                "decentralized": 1e-4, "local_sgd": None, "async_model_averaging": None}


@pytest.fixture(scope="module")
def ddp_reference() -> dict[str, Run]:
    return {}


def _after_fit(run: Run, rank: int) -> dict[str, Any]:
    import json

    return json.loads((run.out / f"after_fit_rank{rank}.json").read_text())  # type: ignore[no-any-return]


def _params(record: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v) for k, v in record["params"].items()}


@pytest.mark.parametrize(("name", "options"), [
    ("ddp_fp16_compress", {}), ("ddp_bf16_compress", {}), ("ddp_int8_compress", {}), ("local_sgd", {}),
    ("decentralized", {}), ("async_model_averaging", {"interval_ms": 5})])
def test_converges_and_ranks_end_equal(train: Callable[..., Run], ddp_reference: dict[str, Run], name: str,
                                      options: dict[str, Any]) -> None:
    if "ddp" not in ddp_reference:
        ddp_reference["ddp"] = train({**SETTINGS, "strategy": "ddp"})
    reference = _after_fit(ddp_reference["ddp"], 0)
    run = train({**SETTINGS, "strategy": name, "strategy_options": options})
    first, second = _after_fit(run, 0), _after_fit(run, 1)
    assert_close(_params(first), _params(second), tol=0.0)
    for r in run.records:
        losses = r["losses"]
        assert sum(losses[-5:]) / 5 < 0.25 * sum(losses[:5]) / 5, f"{name} did not converge: {losses}"
    tol = CLOSE_TO_DDP[name]
    if tol is not None:
        assert_close(_params(first), _params(reference), tol=tol)
    sent = first["communication"]
    fp32_per_step = PARAMS * 4
    if name in ("ddp_fp16_compress", "ddp_bf16_compress"):
        assert sent == {"bytes": STEPS * fp32_per_step // 2, "calls": STEPS}
    elif name == "ddp_int8_compress":
        # each parameter starts a chunk: 512 + 256 + 256 + 256 = 1280, padded to a multiple of 2 * 256
        padded = 1536
        phase1, phase2 = padded + padded // 256 * 8, padded // 2 + padded // 2 // 256 * 8  # codes + [min, step]
        assert sent == {"bytes": STEPS * (phase1 + phase2), "calls": 2 * STEPS}
    elif name == "local_sgd":  # every 8 steps, plus the epoch-end averages (2 epochs of 32 batches per rank)
        assert first["rounds"] == STEPS // 8 and sent["calls"] >= STEPS // 8
        assert sent["bytes"] <= (STEPS // 8 + 2) * fp32_per_step
    elif name == "decentralized":
        assert first["rounds"] == STEPS and sent["bytes"] >= STEPS * fp32_per_step
    else:
        assert first["rounds"] > 0


@pytest.mark.parametrize("name", ["ddp_fp16_compress", "async_model_averaging"])
def test_spawn_pickles_the_strategy_to_its_workers(train: Callable[..., Run], name: str) -> None:
    """Hooks, locks and threads must survive ``start_method="spawn"`` (the strategy travels to the workers)."""
    run = train({**SETTINGS, "max_steps": 8, "strategy": name, "strategy_options": {"start_method": "spawn"}})
    assert [r["rank"] for r in run.records] == [0, 1]
    assert_close(run.params(0), run.params(1), tol=0.0)


class TestFp16CompressConformance(StrategyConformance):
    strategy = "ddp_fp16_compress"
    devices = 2


class TestInt8CompressConformance(StrategyConformance):
    strategy = "ddp_int8_compress"
    devices = 2


class TestLocalSGDConformance(StrategyConformance):
    strategy = "local_sgd"
    devices = 2


class TestAsyncModelAveragingConformance(StrategyConformance):
    strategy = "async_model_averaging"
    devices = 2


def test_int8_quantization_error_is_at_most_half_a_step() -> None:
    rows = torch.randn(64, 256) * torch.logspace(-6, 2, 64)[:, None]
    codes, meta = quantize(rows)
    assert codes.dtype == torch.uint8 and meta.shape == (64, 2)
    error = (dequantize(codes, meta) - rows).abs().amax(dim=1)
    assert bool((error <= meta[:, 1] * 0.5 + 1e-6 * rows.abs().amax(dim=1)).all())
    constant = torch.full((1, 8), 3.0)
    assert torch.equal(dequantize(*quantize(constant)), constant)


def test_gossip_ring_reaches_every_peer_and_pairs_up() -> None:
    world = 5
    for round_index in range(world - 1):
        sends = {rank: shift_peers(rank, world, round_index) for rank in range(world)}
        assert sorted(to for to, _ in sends.values()) == list(range(world))  # a permutation: doubly stochastic
        assert all(sends[to][1] == rank for rank, (to, _) in sends.items())  # the receiver expects this sender
    heard = {shift_peers(0, world, r)[1] for r in range(world - 1)}
    assert heard == {1, 2, 3, 4}


@pytest.mark.filterwarnings("ignore:precision='16-mixed' on the CPU")
def test_invalid_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"^period=0"):
        LocalSGDStrategy(period=0)
    with pytest.raises(ConfigError, match=r"^peers='star'"):
        LocalSGDStrategy(peers="star")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^interval_ms=-1"):
        AsyncModelAveragingStrategy(interval_ms=-1)
    with pytest.raises(ConfigError, match=r"^comm_hook=.*is set by CompressedDDPStrategy itself"):
        CompressedDDPStrategy(comm_hook=lambda state, bucket: None)
    # Declared as data (supported_precisions): 16-mixed's scaler skips steps on some ranks but not others.
    with pytest.raises(ConfigError, match=r"^precision='16-mixed': is not supported by strategy='local_sgd'") as info:
        quiet_trainer(strategy="local_sgd", devices=2, precision="16-mixed")
    assert "'bf16-mixed'" in str(info.value)


class _BucketDouble:
    """Test double for ``dist.GradBucket`` (DDP builds those in C++ only): a flat buffer and its parameters."""

    def __init__(self, grads: list[torch.Tensor]) -> None:
        self._params = [torch.nn.Parameter(torch.empty_like(g)) for g in grads]
        self._buffer = torch.cat([g.reshape(-1) for g in grads])

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def parameters(self) -> list[torch.nn.Parameter]:
        return self._params


def test_int8_hook_does_not_depend_on_the_bucket_layout(tmp_path: Any) -> None:
    """DDP rebuilds its buckets after the first step; a resumed process starts from the initial layout again.

    The quantized average of a parameter must be the same whichever parameters share its bucket, in whatever
    order, or a resumed run would round differently from an uninterrupted one.
    """
    import torch.distributed as dist

    from xtrain.strategies._internal.comm_hooks import HookState, int8_hook

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        a, b, c = torch.randn(300) * 5, torch.randn(40) * 0.01, torch.randn(7, 9)
        state = HookState(chunk_size=64)
        together = int8_hook(state, _BucketDouble([a, b, c])).wait()  # type: ignore[arg-type]
        reordered = int8_hook(state, _BucketDouble([c, a])).wait()  # type: ignore[arg-type]
        alone = int8_hook(state, _BucketDouble([b])).wait()  # type: ignore[arg-type]
        assert torch.equal(together[:300], reordered[63:])
        assert torch.equal(together[340:], reordered[:63])
        assert torch.equal(together[300:340], alone)
        assert not torch.equal(together[300:340], b)  # it did quantize
        assert (together[300:340] - b).abs().max() <= (b.max() - b.min()) / 255 / 2 + 1e-9
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("default", [torch.float16, torch.bfloat16, torch.float64])
def test_async_round_message_is_float32_whatever_the_default_dtype(default: torch.dtype) -> None:
    # '-true' precisions switch torch's default dtype around each step, process-wide, while the averaging thread
    # builds its message: a rank that built it under float64 sent twice the bytes its peer expected (gloo abort).
    tensors = [torch.arange(6, dtype=torch.float16).reshape(2, 3), torch.ones(2, dtype=torch.float64)]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        message = _round_message(tensors, stop=True)
    finally:
        torch.set_default_dtype(previous)
    assert message.dtype == torch.float32 and message.device.type == "cpu"
    assert message.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("precision", ["64-true", "16-true"])
def test_async_averaging_rounds_pair_up_under_true_precisions(train: Callable[..., Run], precision: str) -> None:
    # Rounds back to back (interval 0) while the main thread switches the default dtype every step.
    run = train({**SETTINGS, "max_steps": 30, "precision": precision, "strategy": "async_model_averaging",
                 "strategy_options": {"interval_ms": 0}})
    first, second = _after_fit(run, 0), _after_fit(run, 1)
    assert_close(_params(first), _params(second), tol=0.0)
