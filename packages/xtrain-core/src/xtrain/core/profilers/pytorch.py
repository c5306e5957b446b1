"""``torch.profiler`` over a window of steps: Chrome traces, TensorBoard profile files and an operator table."""

from __future__ import annotations

import functools
import inspect
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from typing_extensions import override

from xtrain.core.errors import ConfigError
from xtrain.core.profilers.profiler import Profiler

__all__ = ["PyTorchProfiler"]

_STEP_ACTION = {"fit": "training_step", "validate": "validation_step", "test": "test_step", "predict": "predict_step"}
_DEFAULT_WINDOW = {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}
_SORT_KEYS = ("cpu_time", "cuda_time", "device_time", "cpu_time_total", "cuda_time_total", "device_time_total",
              "self_cpu_time_total", "self_cuda_time_total", "self_device_time_total", "cpu_memory_usage",
              "cuda_memory_usage", "device_memory_usage", "self_cpu_memory_usage", "self_cuda_memory_usage",
              "self_device_memory_usage", "count")
_OWN_KWARGS = ("record_shapes", "profile_memory", "with_stack")


class PyTorchProfiler(Profiler):
    """Records operators (CPU, and CUDA when available) for a window of steps chosen by a schedule.

    Each step of the stage (``training_step`` when fitting, ``validation_step`` when validating...) advances the
    schedule: ``wait`` steps are skipped, ``warmup`` steps are recorded and thrown away, then ``active`` steps are
    kept, ``repeat`` times. Left at its default (1, 1, 3, once), the schedule keeps the profiler's cost negligible
    in a long run; a stage with fewer steps (per epoch, when fitting) than the window's 5 is traced whole instead,
    every step, as Lightning's default does, since the window would otherwise catch little or nothing.

    Every traced window is written as a Chrome trace (``<dirpath>/<filename>-<stage>-rank<N>-<window>.pt.trace.json``,
    open it at ``chrome://tracing`` or Perfetto) and, with ``tensorboard=True``, into ``<dirpath>/tensorboard`` for
    TensorBoard's profiler plugin. The Trainer's actions show in the traces as ``record_function`` ranges, and so
    does each submodule's forward (``record_module_names``).

    The parameters up to ``table_kwargs`` may be passed by position in Lightning's order, a deliberate exception to
    xtrain's keyword-only rule so that Lightning code runs unchanged; the rest are keyword-only.

    Args:
        dirpath: Where traces and the report go (default: the Trainer's ``log_dir``).
        filename: Trace file prefix (default ``"trace"``); when given, each rank's operator table is also written.
        group_by_input_shapes: Group the table's rows by input shape too (needs ``record_shapes=True``).
        emit_nvtx: Lightning's NVTX mode; not supported (a ``ConfigError``): profile under Nsight Systems directly.
        export_to_chrome: Write the Chrome trace files (``False``: only the TensorBoard files and the table).
        row_limit: Rows of the operator table (``-1``: all).
        sort_by_key: Column the table is sorted by (default ``cuda_time_total`` when CUDA is recorded, else
            ``cpu_time_total``).
        record_module_names: Mark each submodule's forward as a ``[pl][module]<class>: <name>`` range, the names
            Lightning writes, so that a trace shows which layer ran which operators.
        table_kwargs: More keywords for the table (``torch.autograd.profiler.EventList.table``), such as
            ``max_name_column_width``.
        wait: Steps skipped first (default 1).
        warmup: Steps recorded and discarded, the profiler's own start-up (default 1).
        active: Steps kept per window (default 3).
        repeat: Windows (default 1; 0: until the stage ends).
        tensorboard: Also write TensorBoard profile files.
        record_shapes: Record input shapes of operators.
        profile_memory: Record tensor allocations.
        with_stack: Record Python stacks (slow).
        profiler_kwargs: Passed on to ``torch.profiler.profile``, as Lightning does: ``activities``,
            ``with_flops``, ``with_modules``, a ``schedule`` of your own (instead of ``wait``... ``repeat``) or an
            ``on_trace_ready`` handler (instead of the files above).
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 group_by_input_shapes: bool = False, emit_nvtx: bool = False, export_to_chrome: bool = True,
                 row_limit: int = 20, sort_by_key: str | None = None, record_module_names: bool = True,
                 table_kwargs: dict[str, Any] | None = None, *, wait: int | None = None, warmup: int | None = None,
                 active: int | None = None, repeat: int | None = None, tensorboard: bool = True,
                 record_shapes: bool = False, profile_memory: bool = False, with_stack: bool = False,
                 **profiler_kwargs: Any) -> None:
        super().__init__(dirpath, filename)
        if emit_nvtx:
            raise ConfigError("emit_nvtx", emit_nvtx, "is not supported by xtrain's PyTorchProfiler.",
                              fix="leave it False, and run under Nsight Systems (nsys profile -t cuda,nvtx) for NVTX "
                                  "ranges, or read the Chrome trace this profiler writes.")
        from torch.autograd.profiler import EventList
        from torch.profiler import profile

        window = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        given = [name for name, value in window.items() if value is not None]
        if "schedule" in profiler_kwargs and given:
            raise ConfigError("schedule", profiler_kwargs["schedule"], f"was given together with {', '.join(given)}.",
                              fix="pass either schedule=torch.profiler.schedule(...) or wait/warmup/active/repeat.")
        unknown = sorted(set(profiler_kwargs) - set(inspect.signature(profile.__init__).parameters) - {"self"})
        if unknown or any(k in profiler_kwargs for k in _OWN_KWARGS):
            bad = unknown[0] if unknown else next(k for k in _OWN_KWARGS if k in profiler_kwargs)
            raise ConfigError(bad, profiler_kwargs[bad], "is not a keyword of torch.profiler.profile that "
                              "PyTorchProfiler passes on.", fix="check the spelling against torch.profiler.profile.")
        table_keys = set(inspect.signature(EventList.table).parameters) - {"self", "sort_by", "row_limit"}
        for key in table_kwargs or {}:
            if key not in table_keys:
                raise ConfigError("table_kwargs", key, "is not a keyword of the operator table.",
                                  choices=sorted(table_keys), fix="pass sort_by_key= and row_limit= as arguments.")
        if sort_by_key is None:
            sort_by_key = f"{'cuda' if self._records_cuda(profiler_kwargs.get('activities')) else 'cpu'}_time_total"
        elif sort_by_key not in _SORT_KEYS:
            raise ConfigError("sort_by_key", sort_by_key, "is not a column of the operator table.",
                              choices=list(_SORT_KEYS), fix='write sort_by_key="cpu_time_total".')
        self.schedule = {name: _DEFAULT_WINDOW[name] if value is None else value for name, value in window.items()}
        self.auto_schedule = not given and "schedule" not in profiler_kwargs
        self.group_by_input_shapes = group_by_input_shapes and record_shapes
        self.export_to_chrome, self.tensorboard = export_to_chrome, tensorboard
        self.row_limit, self.sort_by_key = row_limit, sort_by_key
        self.record_module_names = record_module_names
        self.table_kwargs = dict(table_kwargs or {})
        self.options: dict[str, Any] = {"record_shapes": record_shapes, "profile_memory": profile_memory,
                                        "with_stack": with_stack}
        self.profiler_kwargs = profiler_kwargs
        self.traces: list[Path] = []
        self.traced_whole = False
        self._step_action = "training_step"
        self._ranges: dict[str, list[Any]] = {}
        self._windows = 0
        self._profiler: Any = None
        self._module: torch.nn.Module | None = None
        self._stage_steps: float | None = None
        self._handles: list[Any] = []

    @staticmethod
    def _records_cuda(activities: Any) -> bool:
        from torch.profiler import ProfilerActivity

        return ProfilerActivity.CUDA in activities if activities else torch.cuda.is_available()

    def bind_run(self, module: torch.nn.Module | None, steps: float | None) -> None:
        """The Trainer's module (for ``record_module_names``) and how many steps the coming stage runs (per epoch,
        when fitting), told by the Trainer before :meth:`setup` (a profiler used outside a Trainer may call it)."""
        self._module, self._stage_steps = module, steps

    @override
    def setup(self, *, stage: str, global_rank: int, log_dir: Path) -> None:
        super().setup(stage=stage, global_rank=global_rank, log_dir=log_dir)
        from torch.profiler import ProfilerActivity, profile, schedule

        self._step_action = _STEP_ACTION.get(stage, "training_step")
        self._ranges = {}
        self._windows = 0
        window = self.schedule["wait"] + self.schedule["warmup"] + self.schedule["active"]
        self.traced_whole = self.auto_schedule and self._stage_steps is not None and self._stage_steps < window
        kwargs = dict(self.profiler_kwargs)
        if not kwargs.get("activities"):
            kwargs["activities"] = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available()
                                                             else [])
        if "schedule" not in kwargs and not self.traced_whole:
            kwargs["schedule"] = schedule(**self.schedule)
        kwargs["on_trace_ready"] = functools.partial(self._ready, kwargs.get("on_trace_ready"))
        self._profiler = profile(**kwargs, **self.options)
        self._profiler.start()
        if self.record_module_names and self._module is not None:
            self._record_modules(self._module)

    def _record_modules(self, module: torch.nn.Module) -> None:
        open_ranges: dict[str, list[Any]] = {}
        for name, sub in module.named_modules():
            if name:
                label = f"[pl][module]{type(sub).__module__}.{type(sub).__qualname__}: {name}"
                self._handles.append(sub.register_forward_pre_hook(
                    functools.partial(_enter_range, open_ranges, label)))
                self._handles.append(sub.register_forward_hook(
                    functools.partial(_exit_range, open_ranges, label), always_call=True))

    def _ready(self, handler: Callable[[Any], None] | None, prof: Any) -> None:
        assert self.dirpath is not None
        self._windows += 1
        if handler is not None:
            handler(prof)
            return
        if not (self.export_to_chrome or self.tensorboard):
            return
        self.dirpath.mkdir(parents=True, exist_ok=True)
        board = self.dirpath / "tensorboard"
        board_path = board / f"rank{self.global_rank}.{time.time_ns()}.pt.trace.json"
        if self.tensorboard:
            board.mkdir(exist_ok=True)
        if not self.export_to_chrome:
            prof.export_chrome_trace(str(board_path))
            return
        path = self.dirpath / f"{self.filename or 'trace'}-{self.stage}-rank{self.global_rank}-{self._windows}" \
                              f".pt.trace.json"
        prof.export_chrome_trace(str(path))
        self.traces.append(path)
        if self.tensorboard:  # the plugin reads <logdir>/<run>/<worker>.<time>.pt.trace.json; a trace exports once
            shutil.copyfile(path, board_path)

    @override
    def start(self, action: str) -> None:
        if action == self._step_action and self._profiler is not None:
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
        if self._profiler is None:
            return ""
        how = "every step traced (a short stage)" if self.traced_whole else f"{self._windows} window(s) traced"
        head = f"PyTorch profiler report ({self.stage}, rank {self.global_rank}): {how}"
        if not self._windows:
            return f"{head}; the stage had fewer steps than the schedule {self.schedule} needs."
        averages = self._profiler.key_averages(group_by_input_shape=self.group_by_input_shapes)
        table = averages.table(sort_by=self.sort_by_key, row_limit=self.row_limit, **self.table_kwargs)
        traces = f", traces: {', '.join(str(p) for p in self.traces)}" if self.traces else ""
        return f"{head}{traces}\n{table}"

    @override
    def teardown(self) -> None:
        if self._profiler is not None:
            self._profiler.stop()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        super().teardown()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its live torch profiler, ranges and hooks, for launchers that pickle the Trainer."""
        state = dict(vars(self))
        state.update(_profiler=None, _ranges={}, _handles=[], _module=None)
        return state


def _enter_range(open_ranges: dict[str, list[Any]], label: str, *_: Any) -> None:
    record = torch.profiler.record_function(label)
    record.__enter__()
    open_ranges.setdefault(label, []).append(record)


def _exit_range(open_ranges: dict[str, list[Any]], label: str, *_: Any) -> None:
    stack = open_ranges.get(label)
    if stack:
        stack.pop().__exit__(None, None, None)
