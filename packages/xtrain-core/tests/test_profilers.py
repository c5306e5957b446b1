"""Trainer(profiler=...): the simple table, cProfile per action, torch.profiler traces; nothing wrapped without one."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from xtrain.core import Trainer
from xtrain.core.errors import ConfigError
from xtrain.core.profilers import AdvancedProfiler, PassThroughProfiler, Profiler, PyTorchProfiler, SimpleProfiler
from xtrain.core.testing.models import TinyClassifier, tiny_loaders


def _fit(tmp_path: Path, profiler: Any, **kwargs: Any) -> Trainer:
    train, val = tiny_loaders(n=128)  # 8 steps per epoch
    trainer = Trainer(max_epochs=1, profiler=profiler, default_root_dir=tmp_path, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **kwargs)
    trainer.fit(TinyClassifier(), train, val)
    return trainer


def test_simple_profiler_prints_a_table_of_hooks_and_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _fit(tmp_path, "simple")
    out = capsys.readouterr().out
    assert "Profiler report (fit, rank 0)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line and not line.startswith("Profiler")}
    assert rows["training_step"][1] == "8" and rows["backward"][1] == "8" and rows["optimizer_step"][1] == "8"
    assert rows["validation_step"][1] == "2" and rows["[Stage]fit"][1] == "1"
    assert "[Callback]ModelCheckpoint.on_save_point" in rows and "[TrainModule]TinyClassifier.setup" not in rows
    assert isinstance(trainer.profiler, SimpleProfiler)
    assert "run_step" not in vars(trainer.strategy)  # the strategy's methods are given back after the stage


def test_simple_profiler_writes_each_ranks_report_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = Trainer(profiler=SimpleProfiler(dirpath=tmp_path / "perf", filename="report"), logger=False,
                      enable_progress_bar=False, default_root_dir=tmp_path)
    _, val = tiny_loaders(n=128)
    trainer.validate(TinyClassifier(), val)
    text = (tmp_path / "perf" / "report-validate-rank0.txt").read_text()
    assert "[Stage]validate" in text and "validation_step" in text
    assert "Profiler report" not in capsys.readouterr().out


def test_advanced_profiler_reports_functions_per_action(tmp_path: Path) -> None:
    _fit(tmp_path, AdvancedProfiler(dirpath=tmp_path, filename="adv", line_count_restriction=40))
    text = (tmp_path / "adv-fit-rank0.txt").read_text()
    assert "Profile of training_step:" in text and "Profile of backward:" in text
    training = text.split("Profile of training_step:")[1].split("Profile of")[0]
    # TinyClassifier.training_step's own work shows under its action (40 lines: at 10, timing noise could push
    # cross_entropy below the cut, as once in a local run)
    assert "cross_entropy" in training


def test_pytorch_profiler_writes_chrome_and_tensorboard_traces(tmp_path: Path) -> None:
    profiler = PyTorchProfiler(dirpath=tmp_path / "prof", filename="run", wait=1, warmup=1, active=3)
    _fit(tmp_path, profiler)
    chrome = sorted((tmp_path / "prof").glob("run-fit-rank0-*.pt.trace.json"))
    assert len(chrome) == 1 and profiler.traces == chrome
    names = {e.get("name") for e in json.loads(chrome[0].read_text())["traceEvents"]}
    assert {"training_step", "backward", "optimizer_step"} <= names
    assert any(str(n).startswith("aten::") for n in names)
    board = list((tmp_path / "prof" / "tensorboard").glob("rank0.*.pt.trace.json"))
    assert len(board) == 1
    steps = [e for e in json.loads(board[0].read_text())["traceEvents"] if e.get("name") == "training_step"]
    assert len(steps) == 3  # the active window of the schedule
    assert "training_step" in (tmp_path / "prof" / "run-fit-rank0.txt").read_text()


def test_no_profiler_wraps_nothing(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, None)
    assert type(trainer.profiler) is PassThroughProfiler
    fns = trainer._hooks.get("on_save_point")
    assert fns and all(isinstance(fn, functools.partial) for fn in fns)  # the callbacks' bound methods as they are
    profiled = _fit(tmp_path, "simple")
    assert not any(isinstance(fn, functools.partial) for fn in profiled._hooks.get("on_save_point"))


def test_profiler_setting_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="simple"):
        Trainer(profiler="fast")
    assert isinstance(Trainer(profiler="advanced", logger=False).profiler, AdvancedProfiler)
    assert issubclass(PyTorchProfiler, Profiler)


def test_user_code_profiles_its_own_sections(tmp_path: Path) -> None:
    profiler = SimpleProfiler(dirpath=tmp_path, filename="own")

    class Sections(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            with profiler.profile("my_section"):
                return super().training_step(batch, batch_idx)

    train, _ = tiny_loaders(n=64)
    Trainer(max_epochs=1, profiler=profiler, logger=False, enable_progress_bar=False,
            default_root_dir=tmp_path).fit(Sections(), train)
    assert profiler.recorded_durations["my_section"] and len(profiler.recorded_durations["my_section"]) == 4
