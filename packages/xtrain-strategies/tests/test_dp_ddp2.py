"""``dp`` and ``ddp2``: what they do on the CPU (documented and tested) and, where CUDA exists, on GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from strategies_helpers import Run, assert_close
from xtrain.core import ConfigError, Trainer
from xtrain.core.testing import TinyClassifier, tiny_loaders
from xtrain.strategies._internal.redirect import StepRedirect, _MutedTrainer, call_step
from xtrain.strategies.dp import DataParallelStrategy, mean_loss

needs_two_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                    reason="needs 2 CUDA GPUs")


def _quiet(**kwargs: Any) -> Trainer:
    return Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                   **kwargs)


class EndRecorder(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.ends: list[tuple[int, ...]] = []

    def training_step_end(self, step_output: Any) -> Any:
        self.ends.append(tuple(step_output.shape))
        return step_output


def test_dp_on_cpu_with_one_device_trains_and_calls_training_step_end() -> None:
    module = EndRecorder()
    trainer = _quiet(accelerator="cpu", devices=1, strategy="dp", max_steps=5)
    assert isinstance(trainer.strategy, DataParallelStrategy) and trainer.strategy.distributed_sampler_kwargs is None
    trainer.fit(module, tiny_loaders()[0])
    assert module.ends == [()] * 5 and module.losses[-1] < module.losses[0]


@pytest.mark.parametrize(("strategy", "kwargs", "argument"), [
    ("dp", {"devices": 2}, "devices=2"), ("dp", {"devices": 1, "num_nodes": 2}, "num_nodes=2"),
    ("ddp2", {"devices": 2}, "devices=2")])
def test_dp_and_ddp2_refuse_several_cpu_devices_with_the_fix(strategy: str, kwargs: dict[str, Any],
                                                             argument: str) -> None:
    with pytest.raises(ConfigError) as info:
        _quiet(accelerator="cpu", strategy=strategy, **kwargs)
    assert str(info.value).startswith(argument) and "Fix:" in str(info.value)
    assert "strategy='ddp" in str(info.value)


def test_ddp2_on_cpu_is_one_process_per_node_with_gradients_all_reduced(train: Callable[..., Run]) -> None:
    ddp2 = train({"strategy": "ddp2", "devices": 1, "num_nodes": 2, "max_steps": 6}, how="two_nodes")
    ddp = train({"strategy": "ddp", "devices": 2, "max_steps": 6})
    assert [r["strategy"] for r in ddp2.records] == ["DDP2Strategy"] * 2
    assert [(r["rank"], r["node_rank"], r["world_size"]) for r in ddp2.records] == [(0, 0, 2), (1, 1, 2)]
    assert ddp2.records[0]["seen"] == ddp.records[0]["seen"]  # sharded by node
    assert_close(ddp2.params(0), ddp2.params(1), tol=0.0)
    assert_close(ddp2.params(0), ddp.params(0), tol=1e-6)


def test_mean_loss_averages_per_device_losses() -> None:
    assert mean_loss(torch.tensor([1.0, 3.0])).item() == 2.0
    assert mean_loss({"loss": torch.tensor([2.0, 4.0]), "x": 1})["loss"].item() == 3.0
    scalar = torch.tensor(5.0)
    assert mean_loss(scalar) is scalar


def test_secondary_dp_replicas_do_not_log() -> None:
    """A DataParallel replica on another device gets a Trainer whose self.log is a no-op; the original is untouched.

    The replica is made by DataParallel's own replication hook; its parameters are on the CPU while the primary
    device is declared as ``meta``, which is what a replica on a second GPU looks like to the wrapper.
    """
    module = TinyClassifier()
    trainer = _quiet(accelerator="cpu", devices=1, max_steps=1)
    module._trainer = trainer
    logged: list[str] = []
    trainer._metrics.log = lambda name, *a, **k: logged.append(name)  # type: ignore[method-assign]
    batch = (torch.randn(4, 16), torch.randint(0, 4, (4,)))
    primary = StepRedirect(module, primary_device=torch.device("cpu"))
    call_step(primary, "training_step", batch, 0)
    assert logged == ["train_loss"]
    replica = StepRedirect(module, primary_device=torch.device("meta"))._replicate_for_data_parallel()
    replica._modules["module"] = module._replicate_for_data_parallel()
    for name, param in module.named_parameters():  # DataParallel sets the replica's tensors the same way
        owner = replica._modules["module"].get_submodule(name.rpartition(".")[0])
        owner._parameters[name.rpartition(".")[2]] = param.detach().clone()
    call_step(replica, "training_step", batch, 0)
    assert logged == ["train_loss"], "a secondary replica logged"
    assert isinstance(replica._modules["module"].__dict__["_trainer"], _MutedTrainer)
    assert module._trainer is trainer


@pytest.mark.gpu
@needs_two_gpus
def test_dp_on_two_gpus_splits_the_batch() -> None:
    module = EndRecorder()
    trainer = _quiet(accelerator="cuda", devices=2, strategy="dp", max_steps=5)
    trainer.fit(module, tiny_loaders()[0])
    assert module.ends == [(2,)] * 5 and module.losses[-1] < module.losses[0]


@pytest.mark.gpu
@needs_two_gpus
def test_dp_predict_concatenates_device_outputs() -> None:
    trainer = _quiet(accelerator="cuda", devices=2, strategy="dp")
    out = trainer.predict(TinyClassifier(), tiny_loaders(shuffle=False)[1])
    assert out[0].shape == (16, 4)
