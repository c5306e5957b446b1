"""Profilers as Lightning's: a pass-through default, ``describe()``, positional ``dirpath``/``filename``, and the
AdvancedProfiler's and PyTorchProfiler's defaults (an outside trial against Lightning 2.6.6, items 6, 8, 16, 17)."""

from __future__ import annotations

import inspect
import json
import pstats
from pathlib import Path
from typing import Any

import pytest

from xtrain.core import Trainer
from xtrain.core.callbacks import Callback
from xtrain.core.errors import ConfigError
from xtrain.core.profilers import AdvancedProfiler, PassThroughProfiler, Profiler, PyTorchProfiler, SimpleProfiler
from xtrain.core.testing.models import TinyClassifier, tiny_loaders


def _fit(tmp_path: Path, profiler: Any = None, n: int = 128, module: TinyClassifier | None = None,
         **kwargs: Any) -> Trainer:
    train, val = tiny_loaders(n=n)  # n / 16 steps per epoch
    trainer = Trainer(max_epochs=1, profiler=profiler, default_root_dir=tmp_path, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **kwargs)
    trainer.fit(module or TinyClassifier(), train, val)
    return trainer


class _SelfTimed(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        with self.trainer.profiler.profile("mine") as name:
            assert name == "mine"
            return super().training_step(batch, batch_idx)


class _WrappedCheck(Callback):
    """Records, while the loop runs, whether any hook or strategy method is wrapped for timing."""

    def __init__(self) -> None:
        self.wrapped: list[bool] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        hooks = [fn for name in ("on_train_batch_end", "on_save_point") for fn in trainer._hooks.get(name)]
        self.wrapped.append(any(hasattr(fn, "__wrapped__") for fn in hooks) or "run_step" in vars(trainer.strategy))


def test_default_profiler_passes_through_and_user_code_can_profile(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, module=_SelfTimed())
    assert type(trainer.profiler) is PassThroughProfiler
    assert type(Trainer(logger=False).profiler) is PassThroughProfiler
    assert PassThroughProfiler().summary() == ""


def test_default_profiler_wraps_nothing_but_a_subclass_of_it_is_a_real_profiler(tmp_path: Path) -> None:
    check = _WrappedCheck()
    _fit(tmp_path, callbacks=[check])
    assert check.wrapped and not any(check.wrapped)  # the step loop calls exactly what it calls unprofiled

    class Counting(PassThroughProfiler):
        def __init__(self) -> None:
            super().__init__()
            self.started: list[str] = []

        def start(self, action: str) -> None:
            self.started.append(action)

    counting, check = Counting(), _WrappedCheck()
    _fit(tmp_path, counting, callbacks=[check])
    assert all(check.wrapped) and "training_step" in counting.started


def test_a_profiler_with_only_start_and_stop_is_enough(tmp_path: Path) -> None:
    class Minimal(Profiler):
        def start(self, action: str) -> None:
            pass

        def stop(self, action: str) -> None:
            pass

    Minimal().describe()  # Lightning's custom profilers often have no summary
    _fit(tmp_path, Minimal())


def test_lightning_signatures_take_dirpath_and_filename_by_position() -> None:
    def leading(cls: type) -> list[str]:
        params = list(inspect.signature(cls).parameters.values())
        return [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]

    assert leading(SimpleProfiler) == ["dirpath", "filename", "extended"]
    assert leading(AdvancedProfiler) == ["dirpath", "filename", "line_count_restriction", "dump_stats"]
    assert leading(PyTorchProfiler) == ["dirpath", "filename", "group_by_input_shapes", "emit_nvtx", "export_to_chrome",
                                        "row_limit", "sort_by_key", "record_module_names", "table_kwargs"]
    assert leading(PassThroughProfiler) == ["dirpath", "filename"]
    simple = SimpleProfiler("perf", "report", False)
    assert (simple.dirpath, simple.filename, simple.extended) == (Path("perf"), "report", False)


def test_describe_and_recorded_durations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiler = SimpleProfiler()
    assert profiler.describe() is None and profiler.recorded_durations == {}  # before any run, as Lightning's
    trainer = _fit(tmp_path, profiler, module=_SelfTimed())
    assert trainer.profiler is profiler and len(profiler.recorded_durations["mine"]) == 8
    assert len(profiler.recorded_durations["training_step"]) == 8
    capsys.readouterr()
    profiler.describe()
    assert "Profiler report (fit, rank 0)" in capsys.readouterr().out

    written = SimpleProfiler(tmp_path / "perf", "report")
    _fit(tmp_path, written)
    report = tmp_path / "perf" / "report-fit-rank0.txt"
    report.unlink()
    written.describe()
    assert "training_step" in report.read_text()
    short = SimpleProfiler(extended=False)
    _fit(tmp_path, short)
    assert "Calls" not in short.summary() and "Mean (s)" in short.summary()


def _many_functions() -> None:
    for i in range(30):
        exec(f"def _f{i}():\n    return {i}\n_f{i}()", {})


def test_advanced_profiler_lists_every_function_by_default_and_dumps_stats(tmp_path: Path) -> None:
    profiler = AdvancedProfiler(tmp_path, "adv", dump_stats=True)
    assert profiler.line_count_restriction == 1.0
    with profiler.profile("many"):
        _many_functions()
    text = profiler.summary()
    assert all(f"(_f{i})" in text for i in range(30))  # 20 would have been listed before
    limited = AdvancedProfiler(line_count_restriction=5)
    with limited.profile("many"):
        _many_functions()
    assert sum("(_f" in line for line in limited.summary().splitlines()) <= 5
    profiler.describe()
    assert (tmp_path / "adv-fit-rank0.txt").exists()
    stats = pstats.Stats(str(tmp_path / "adv-fit-rank0-many.prof"))
    assert any(name == "_f7" for _, _, name in stats.stats)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="line_count_restriction"):
        AdvancedProfiler(line_count_restriction=0)


def _trace_names(path: Path) -> list[str]:
    return [str(e.get("name")) for e in json.loads(path.read_text())["traceEvents"]]


def test_pytorch_profiler_traces_a_short_stage_whole_and_names_modules(tmp_path: Path) -> None:
    short = PyTorchProfiler(tmp_path / "short", "run")
    _fit(tmp_path, short, n=48)  # 3 steps: the default window (1 + 1 + 3) would catch at most one
    assert short.traced_whole and len(short.traces) == 1
    names = _trace_names(short.traces[0])
    assert names.count("training_step") == 3
    assert "[pl][module]torch.nn.modules.linear.Linear: net.0" in names
    assert "[pl][module]torch.nn.modules.container.Sequential: net" in names
    assert "every step traced" in (tmp_path / "short" / "run-fit-rank0.txt").read_text()

    long = PyTorchProfiler(tmp_path / "long", "run", record_module_names=False)
    _fit(tmp_path, long, n=128)  # 8 steps: the default window
    assert not long.traced_whole and len(long.traces) == 1
    names = _trace_names(long.traces[0])
    assert names.count("training_step") == 3 and not any(n.startswith("[pl][module]") for n in names)


def test_pytorch_profiler_lightning_arguments(tmp_path: Path) -> None:
    profiler = PyTorchProfiler(tmp_path, "run", False, False, False, 5, "count", True, {"max_name_column_width": 30},
                               tensorboard=True, with_flops=True)
    assert profiler.sort_by_key == "count" and profiler.row_limit == 5 and not profiler.export_to_chrome
    _fit(tmp_path, profiler, n=48)
    assert not list(tmp_path.glob("run-fit-rank0-*.pt.trace.json"))  # export_to_chrome=False
    assert len(list((tmp_path / "tensorboard").glob("rank0.*.pt.trace.json"))) == 1
    lines = (tmp_path / "run-fit-rank0.txt").read_text().splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("---")]
    end = lines[rules[0] + 1].index("# of Calls") + len("# of Calls")  # right-aligned; with_flops adds a column
    calls = [int(line[:end].split()[-1]) for line in lines[rules[1] + 1:rules[2]]]
    assert "FLOPs" in lines[rules[0] + 1]  # with_flops reached torch.profiler.profile
    assert len(calls) == 5 and calls == sorted(calls, reverse=True)  # row_limit, sorted by count
    assert len(lines[rules[1]].split()[0]) == 30  # table_kwargs reached the table
    assert PyTorchProfiler().sort_by_key in ("cpu_time_total", "cuda_time_total")
    with pytest.raises(ConfigError, match="sort_by_key"):
        PyTorchProfiler(sort_by_key="wall")
    with pytest.raises(ConfigError, match="emit_nvtx"):
        PyTorchProfiler(emit_nvtx=True)
    with pytest.raises(ConfigError, match="table_kwargs"):
        PyTorchProfiler(table_kwargs={"sort_by": "count"})
    with pytest.raises(ConfigError, match="with_flopz"):
        PyTorchProfiler(with_flopz=True)
    with pytest.raises(ConfigError, match="schedule"):
        PyTorchProfiler(wait=2, schedule=lambda step: None)
    PyTorchProfiler().describe()  # before any stage: nothing to report, no error
