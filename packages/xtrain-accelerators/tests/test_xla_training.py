"""XLA for real: training, evaluation, checkpoints and the step boundary on XLA's CPU client (``PJRT_DEVICE=CPU``).

These run in the ``xla`` nox session (torch 2.9.1 + torch-xla 2.9.0) and skip elsewhere, saying why. Importing
torch_xla costs about 4.5 s per process, so the single-device tests share the pytest process and only SPMD (which
must be switched on before the first XLA tensor) and the launcher get processes of their own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.accelerators._internal.xla_runtime import pjrt_device
from xtrain.core import Callback, Trainer, TrainModule, seed_everything
from xtrain.core.testing import python_command, run_processes, tiny_dataset

sys.path.insert(0, str(Path(__file__).parent / "scripts"))

from xla_model import LeanClassifier, flat_params

SCRIPTS = Path(__file__).parent / "scripts"

pytestmark = [
    pytest.mark.xla,
    pytest.mark.skipif(pjrt_device() != "CPU", reason="needs torch_xla and PJRT_DEVICE=CPU (run: nox -s xla)"),
]

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def _fit(accelerator: str, *, steps: int, module: TrainModule | None = None, **kwargs: Any) -> tuple[Trainer, Any]:
    seed_everything(0)
    model = module or LeanClassifier()
    train = DataLoader(tiny_dataset(128), batch_size=16, shuffle=False)
    val = DataLoader(tiny_dataset(32, seed=1), batch_size=16)
    trainer = Trainer(accelerator=accelerator, devices=1, max_steps=steps, **{**QUIET, **kwargs})
    trainer.fit(model, train, val)
    return trainer, model


def test_single_xla_trains_like_the_cpu(tmp_path: Path) -> None:
    cpu_trainer, cpu = _fit("cpu", steps=12, default_root_dir=tmp_path / "cpu", enable_checkpointing=False)
    xla_trainer, xla = _fit("xla", steps=12, default_root_dir=tmp_path / "xla", enable_checkpointing=False)
    assert xla_trainer.strategy.name == "single_xla" and xla_trainer.strategy.root_device == torch.device("xla", 0)
    assert next(xla.parameters()).device.type == "xla"
    assert torch.allclose(flat_params(xla), flat_params(cpu), atol=1e-5)
    xla_val = float(xla_trainer.callback_metrics["val_loss"])
    assert abs(xla_val - float(cpu_trainer.callback_metrics["val_loss"])) < 1e-4


def test_one_graph_per_training_step() -> None:
    """The step boundary sits at the start of each batch: after warm-up every step runs one cached graph."""
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    def counts() -> tuple[int, int]:
        xm.wait_device_ops()  # executions finish asynchronously; wait so the counters are exact
        compiles, executions = met.metric_data("CompileTime"), met.metric_data("ExecuteTime")
        return (compiles[0] if compiles else 0, executions[0] if executions else 0)

    class Count(Callback):
        def __init__(self) -> None:
            self.seen: list[tuple[int, int]] = []

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            self.seen.append(counts())

    count = Count()
    _fit("xla", steps=10, enable_checkpointing=False, callbacks=[count], limit_val_batches=0)
    steady = count.seen[3:]
    assert [c for c, _ in steady] == [steady[0][0]] * len(steady), f"recompiled during training: {count.seen}"
    assert [e - steady[0][1] for _, e in steady] == list(range(len(steady))), f"not one execution per step: {count.seen}"


def test_evaluation_runs_under_no_grad_on_xla() -> None:
    """XLA tensors cannot be inference tensors; the accelerator declares it and the loop uses no_grad there."""
    modes: list[tuple[bool, bool]] = []

    class Probe(LeanClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
            super().validation_step(batch, batch_idx)

    trainer = Trainer(accelerator="xla", devices=1, inference_mode=True, **QUIET)
    results = trainer.validate(Probe(), DataLoader(tiny_dataset(32), batch_size=16))
    assert modes == [(False, False), (False, False)]
    assert torch.isfinite(torch.tensor(results[0]["val_loss"]))


def test_checkpoints_hold_cpu_tensors_and_resume_exactly(tmp_path: Path) -> None:
    trainer, _ = _fit("xla", steps=6, default_root_dir=tmp_path)
    last = Path(trainer.checkpoint_callback.last_model_path)  # type: ignore[union-attr]
    state = torch.load(last, weights_only=True)
    devices = {t.device.type for t in state["state_dict"].values()}
    assert devices == {"cpu"}, "a checkpoint written on XLA must load on a machine without XLA"
    assert state["xtrain"]["strategy"] == "single_xla" and state["loops"]["global_step"] == 6
    straight, straight_model = _fit("xla", steps=10, default_root_dir=tmp_path / "straight",
                                    enable_checkpointing=False)
    seed_everything(0)
    resumed_model = LeanClassifier()
    resumed = Trainer(accelerator="xla", devices=1, max_steps=10, default_root_dir=tmp_path / "resumed",
                      enable_checkpointing=False, **QUIET)
    resumed.fit(resumed_model, DataLoader(tiny_dataset(128), batch_size=16, shuffle=False),
                DataLoader(tiny_dataset(32, seed=1), batch_size=16), ckpt_path=last)
    assert resumed.global_step == straight.global_step == 10
    assert torch.allclose(flat_params(resumed_model), flat_params(straight_model), atol=1e-6)


def test_spmd_shards_the_batch_and_matches_the_cpu(tmp_path: Path) -> None:
    env = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = run_processes([python_command(str(SCRIPTS / "xla_spmd_train.py"))], timeout=240, cwd=tmp_path,
                           envs=[env])
    result.check()
    report = json.loads(result.processes[0].stdout.strip().splitlines()[-1])
    assert report["runtime_devices"] == 2
    assert report["shardings"] == ["{devices=[2,1]0,1}"], "the batch must be split along dim 0 over both devices"
    assert report["batch_devices"] == ["xla:0"], "SPMD presents the devices as one virtual device"
    assert report["max_param_diff"] < 1e-5, report


def test_xla_strategy_trains_in_a_worker_and_returns_its_state(tmp_path: Path) -> None:
    env = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = run_processes([python_command(str(SCRIPTS / "xla_launch_train.py"), str(tmp_path))], timeout=240,
                           cwd=tmp_path, envs=[env])
    result.check()
    report = json.loads(result.processes[0].stdout.strip().splitlines()[-1])
    assert report["parent_pid"] not in report["worker_pids"], "torch_xla must have started a worker process"
    assert report["worker_device"] == "xla:0" and report["world_size"] == 1
    assert report["parent_has_worker_weights"], "the caller's module must hold the worker's final weights"
    assert report["global_step_after_second_fit"] == 8 and report["second_fit_changed_weights"]


def test_deterministic_bf16_resume_is_bitwise_on_xla(tmp_path: Path) -> None:
    """XLA keeps bfloat16 intermediates in float32 where a graph allows, and checkpoints cut graphs: without
    ``--xla_allow_excess_precision=false`` the resumed weights differ in the last bit (found by the matrix)."""
    env = {"PJRT_DEVICE": "CPU", "TF_CPP_MIN_LOG_LEVEL": "2", "XLA_FLAGS": ""}
    result = run_processes([python_command(str(SCRIPTS / "xla_bf16_resume.py"), str(tmp_path))], timeout=240,
                           cwd=tmp_path, envs=[env])
    result.check()
    report = json.loads(result.processes[0].stdout.strip().splitlines()[-1])
    assert "--xla_allow_excess_precision=false" in report["xla_flags"].split()
    assert report["dtype"] == "torch.bfloat16"
    assert report["bitwise_equal"]


def test_deterministic_after_the_runtime_started_warns_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.ones(1, device="xla").cpu()  # the runtime runs in this process from here on
    monkeypatch.setenv("XLA_FLAGS", "")
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.warns(UserWarning, match=r"XLA_FLAGS=--xla_allow_excess_precision=false before the process"):
            _fit("xla", steps=1, deterministic=True)
    finally:
        torch.use_deterministic_algorithms(False)
