"""``torch.profiler`` over a window of steps: Chrome traces, TensorBoard profile files and an operator table."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import torch
from typing_extensions import override

from xtrain.core.profilers.profiler import Profiler

__all__ = ["PyTorchProfiler"]

_STEP_ACTION = {"fit": "training_step", "validate": "validation_step", "test": "test_step", "predict": "predict_step"}


class PyTorchProfiler(Profiler):
    """Records operators (CPU, and CUDA when available) for a window of steps chosen by a schedule.

    Each step of the stage (``training_step`` when fitting, ``validation_step`` when validating...) advances the
    schedule: ``wait`` steps are skipped, ``warmup`` steps are recorded and thrown away, then ``active`` steps are
    kept, ``repeat`` times. Every kept window is written as a Chrome trace
    (``<dirpath>/<filename>-<stage>-rank<N>-<window>.pt.trace.json``, open it at ``chrome://tracing`` or Perfetto)
    and, with ``tensorboard=True``, into ``<dirpath>/tensorboard`` for TensorBoard's profiler plugin. The Trainer's
    actions show in the traces as ``record_function`` ranges.

    Args:
        dirpath: Where traces and the report go (default: the Trainer's ``log_dir``).
        filename: Trace file prefix (default ``"trace"``); when given, each rank's operator table is also written.
        wait: Steps skipped first.
        warmup: Steps recorded and discarded (the profiler's own start-up).
        active: Steps kept per window.
        repeat: Windows (0: until the stage ends).
        tensorboard: Also write TensorBoard profile files.
        record_shapes: Record input shapes of operators.
        profile_memory: Record tensor allocations.
        with_stack: Record Python stacks (slow).
        row_limit: Rows of the operator table.
        sort_by: Column the table is sorted by.
    """

    def __init__(self, *, dirpath: str | None = None, filename: str | None = None, wait: int = 1, warmup: int = 1,
                 active: int = 3, repeat: int = 1, tensorboard: bool = True, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, row_limit: int = 20,
                 sort_by: str = "cpu_time_total") -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.schedule = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        self.tensorboard = tensorboard
        self.options: dict[str, Any] = {"record_shapes": record_shapes, "profile_memory": profile_memory, "with_stack": with_stack}
        self.row_limit, self.sort_by = row_limit, sort_by
        self.traces: list[Path] = []

    @override
    def setup(self, *, stage: str, global_rank: int, log_dir: Path) -> None:
        super().setup(stage=stage, global_rank=global_rank, log_dir=log_dir)
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self._step_action = _STEP_ACTION.get(stage, "training_step")
        self._ranges: dict[str, list[Any]] = {}
        self._windows = 0
        self._profiler = profile(activities=activities, schedule=schedule(**self.schedule),
                                 on_trace_ready=self._ready, **self.options)
        self._profiler.start()

    def _ready(self, prof: Any) -> None:
        assert self.dirpath is not None
        self._windows += 1
        self.dirpath.mkdir(parents=True, exist_ok=True)
        path = self.dirpath / f"{self.filename or 'trace'}-{self.stage}-rank{self.global_rank}-{self._windows}" \
                              f".pt.trace.json"
        prof.export_chrome_trace(str(path))
        self.traces.append(path)
        if self.tensorboard:  # the plugin reads <logdir>/<run>/<worker>.<time>.pt.trace.json; a trace exports once
            board = self.dirpath / "tensorboard"
            board.mkdir(exist_ok=True)
            shutil.copyfile(path, board / f"rank{self.global_rank}.{time.time_ns()}.pt.trace.json")

    @override
    def start(self, action: str) -> None:
        if action == self._step_action:
            self._profiler.step()
        record = torch.profiler.record_function(action)
        record.__enter__()
        self._ranges.setdefault(action, []).append(record)

    @override
    def stop(self, action: str) -> None:
        ranges = self._ranges.get(action)
        if not ranges:
            raise ValueError(f"profiler action {action!r} was stopped without being started")
        ranges.pop().__exit__(None, None, None)

    @override
    def summary(self) -> str:
        head = f"PyTorch profiler report ({self.stage}, rank {self.global_rank}): {self._windows} window(s) traced"
        if not self._windows:
            return f"{head}; the stage had fewer steps than the schedule {self.schedule} needs."
        table = self._profiler.key_averages().table(sort_by=self.sort_by, row_limit=self.row_limit)
        return f"{head}, traces: {', '.join(str(p) for p in self.traces)}\n{table}"

    @override
    def teardown(self) -> None:
        self._profiler.stop()
        super().teardown()
