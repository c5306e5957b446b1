"""The fsdp strategy: its options and errors, precision mapping, the Engine under fsdp, and saves killed half-way.

Multi-process checks run the scripts in ``scripts/`` with real gloo processes; portability of checkpoints is in
``test_fsdp_checkpoints.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fsdp_helpers import ENGINE, max_difference, run_script, train, weights
from xtrain.core import ConfigError, Engine, Trainer
from xtrain.core.registry import PRECISIONS, STRATEGIES
from xtrain.core.sharded_checkpoint import read_sharded_checkpoint
from xtrain.strategies._internal.fsdp_setup import (
    mixed_precision_policy,
    param_names,
    rebind_optimizer,
    units_to_shard,
)
from xtrain.strategies.fsdp import FSDPStrategy


def test_names_are_registered() -> None:
    assert isinstance(STRATEGIES.create("fsdp"), FSDPStrategy)
    offload = STRATEGIES.create("fsdp_cpu_offload")
    assert isinstance(offload, FSDPStrategy) and offload.cpu_offload


def test_precisions_fsdp_cannot_honour_are_refused_listing_the_ones_it_can() -> None:
    if "64-true" not in PRECISIONS:
        pytest.skip("needs xtrain-precision")
    with pytest.raises(ConfigError) as info:
        Trainer(accelerator="cpu", devices=2, strategy="fsdp", precision="64-true")
    message = str(info.value)
    assert message.startswith("precision='64-true'") and "strategy='fsdp'" in message
    for name in ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true"):
        assert repr(name) in message


@pytest.mark.parametrize(("options", "argument"), [
    ({"state_dict_type": "zip"}, "state_dict_type"),
    ({"state_dict_type": "full", "async_save": True}, "async_save"),
    ({"min_num_params": 0}, "min_num_params"),
    ({"auto_wrap_policy": "Linear"}, "auto_wrap_policy"),
    ({"activation_checkpointing": [3]}, "activation_checkpointing"),
])
def test_invalid_options_are_config_errors_with_a_fix(options: dict[str, Any], argument: str) -> None:
    with pytest.raises(ConfigError) as info:
        FSDPStrategy(**options)
    assert str(info.value).startswith(f"{argument}=") and "Fix:" in str(info.value)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)


def _model() -> nn.Module:
    return nn.Sequential(_Block(), _Block(), nn.Linear(8, 2))


def test_units_by_class_name_predicate_and_size_are_deepest_first() -> None:
    model = _model()
    assert units_to_shard(model, policy=[_Block], min_num_params=None) == [model[0], model[1]]
    assert units_to_shard(model, policy=["Linear"], min_num_params=None) == [
        model[0].a, model[0].b, model[1].a, model[1].b, model[2]]
    assert units_to_shard(model, policy=lambda m: m is model[1], min_num_params=None) == [model[1]]
    # A Linear(8, 8) holds 72 parameters, a block 144: blocks become units, the small head stays in the root.
    assert units_to_shard(model, policy=None, min_num_params=100) == [model[0], model[1]]
    assert units_to_shard(model, policy=None, min_num_params=None) == []


def test_precisions_map_to_fsdp_mixed_precision_policies() -> None:
    if "bf16-mixed" not in PRECISIONS:
        pytest.skip("needs xtrain-precision")
    mixed = mixed_precision_policy(PRECISIONS.create("bf16-mixed"))  # type: ignore[arg-type]
    assert (mixed.param_dtype, mixed.reduce_dtype) == (torch.bfloat16, torch.float32)
    half = mixed_precision_policy(PRECISIONS.create("16-mixed"))  # type: ignore[arg-type]
    assert (half.param_dtype, half.reduce_dtype) == (torch.float16, torch.float32)
    for name in ("32-true", "bf16-true"):  # weights already in their dtype: nothing to cast
        policy = mixed_precision_policy(PRECISIONS.create(name))  # type: ignore[arg-type]
        assert policy.param_dtype is None and policy.reduce_dtype is None


def test_an_optimizer_created_before_sharding_is_repointed_by_name() -> None:
    model = nn.Linear(3, 2)
    before = param_names(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.weight = nn.Parameter(model.weight.detach().clone())  # what sharding does: new parameter objects
    model.bias = nn.Parameter(model.bias.detach().clone())
    rebind_optimizer(optimizer, [(before, dict(model.named_parameters()))])
    assert optimizer.param_groups[0]["params"] == [model.weight, model.bias]
    stepped = nn.Linear(3, 2)
    names = param_names(stepped)
    adam = torch.optim.Adam(stepped.parameters())
    stepped(torch.ones(1, 3)).sum().backward()
    adam.step()
    stepped.weight = nn.Parameter(stepped.weight.detach().clone())
    with pytest.raises(ConfigError, match="setup_module"):
        rebind_optimizer(adam, [(names, dict(stepped.named_parameters()))])


def test_engine_save_load_round_trip_sharded_and_full(tmp_path: Path) -> None:
    """Engine.save / Engine.load under fsdp continue from the same loss; the sharded one also loads on one device."""
    for options in ({"async_save": True}, {"state_dict_type": "full"}):
        out = tmp_path / options.get("state_dict_type", "sharded")
        out.mkdir()
        run_script(ENGINE, "roundtrip", str(out), json.dumps(options), cwd=out)
        record = json.loads((out / "roundtrip.json").read_text())
        assert record["rest"] == {"step": 3}
        assert torch.allclose(torch.tensor(record["resumed"]), torch.tensor(record["reference"]), rtol=0, atol=1e-6)
        engine = Engine(accelerator="cpu", devices=1)  # the same checkpoint on one device, in this process
        model = engine.setup_module(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
        engine.load(out / "engine.ckpt", {"model": model}, strict=False)
        saved = {k: torch.tensor(v) for k, v in record["saved"].items()}
        assert max_difference({k: v.detach() for k, v in model.state_dict().items()}, saved) == 0.0
    assert (tmp_path / "sharded" / "engine.ckpt").is_dir() and (tmp_path / "full" / "engine.ckpt").is_file()


@pytest.mark.parametrize("fraction", [0.15, 0.6])
def test_sigkill_during_a_sharded_save_leaves_the_previous_last_loadable(tmp_path: Path, fraction: float) -> None:
    """The manifest is swapped atomically after every rank's shards are on disk: a kill mid-save keeps save 2."""
    result = run_script(ENGINE, "killme", str(tmp_path), str(fraction), cwd=tmp_path, check=False)
    assert "killing during save 3" in result.output and result.returncodes != [0], result.output
    done = max(int(n) for n in re.findall(r"saved (\d+)", result.output))
    last = read_sharded_checkpoint(tmp_path / "last.ckpt")
    assert last["i"] in (done, done + 1), "the checkpoint is neither the previous save nor the one in flight"
    assert all(torch.equal(t, torch.full_like(t, float(last["i"]))) for t in last["model"].values())


def test_cpu_offload_activation_checkpointing_and_bf16_mixed_train_like_ddp(tmp_path: Path) -> None:
    """bf16 math differs from DDP's autocast only in rounding order, hence the looser tolerance (measured ~1e-3)."""
    fsdp = train(tmp_path / "fsdp", strategy="fsdp_cpu_offload", precision="bf16-mixed", epochs=1)
    featured = train(tmp_path / "featured", strategy="fsdp", precision="bf16-mixed", epochs=1,
                     options={"cpu_offload": True, "activation_checkpointing": ["Linear"], "min_num_params": 500,
                              "reshard_after_forward": False})
    ddp = train(tmp_path / "ddp", strategy="ddp", precision="bf16-mixed", epochs=1)
    assert fsdp[0]["strategy"] == "FSDPStrategy"
    assert max_difference(weights(fsdp[0]), weights(featured[0])) == 0.0, "recomputation changed the result"
    assert max_difference(weights(fsdp[0]), weights(ddp[0])) <= 2e-2
    assert fsdp[0]["losses"][-1] < fsdp[0]["losses"][0]


def test_validation_with_the_sanity_check_then_training(tmp_path: Path) -> None:
    """Evaluation runs under no_grad, not inference_mode: FSDP2 keeps the parameters it gathered for the next
    forward, and backward refuses inference tensors (found by an outside trial: the first step after the sanity
    check failed)."""
    records = train(tmp_path, strategy="fsdp", epochs=2, validate=True)
    assert len(records) == 2 and len(records[0]["losses"]) == 8
    assert FSDPStrategy.supports_inference_mode is False


def test_16_mixed_skips_an_overflowing_step_on_every_rank(tmp_path: Path) -> None:
    """An inf in one rank's gradient shard makes every rank skip the step and lower the scale together."""
    records = train(tmp_path, strategy="fsdp", precision="16-mixed", epochs=1, inf_on_rank=1)
    assert [r["scale"] for r in records] == [2.0**15, 2.0**15]
    assert max_difference(weights(records[0]), weights(records[1])) == 0.0
