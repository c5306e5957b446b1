"""Engine: xtrain's accelerators, strategies and precisions under a training loop you write yourself.

The Engine resolves its arguments with the same validator as the Trainer and drives the same Strategy objects, so
every name, error and behaviour is shared; nothing about hardware is implemented twice.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import torch
from torch import nn

from xtrain.core._internal.apply import apply_to_tensors, numbers_to_tensors, other_leaves
from xtrain.core._internal.compiled import unwrap_compiled
from xtrain.core._internal.data import prepare_dataloader
from xtrain.core._internal.engine_loader import EngineLoader
from xtrain.core._internal.engine_module import EngineModule, unwrap
from xtrain.core._internal.engine_optimizer import prepare_steps
from xtrain.core._internal.engine_state import refuse_unloadable
from xtrain.core._internal.hang import DEFAULT_HANG_TIMEOUT, parse_hang_timeout
from xtrain.core._internal.manifest import write_manifest
from xtrain.core._internal.metric_gather import gather_objects, gather_rows, pad_to_largest, signatures
from xtrain.core._internal.nonfinite import (
    ENGINE_HINT,
    NonFiniteCheck,
    NonFiniteMode,
    check_nonfinite_mode,
    scaled_by,
)
from xtrain.core._internal.progress_signal import PROGRESS
from xtrain.core._internal.resolve import resolve
from xtrain.core._internal.restore_plan import RestorePlan
from xtrain.core._internal.state_dict import module_names
from xtrain.core.errors import CheckpointError, ConfigError
from xtrain.core.seed import seed_everything
from xtrain.core.strategy import ReduceOp, Strategy

if TYPE_CHECKING:
    from xtrain.core.accelerator import Accelerator
    from xtrain.core.precision import Precision
    from xtrain.core.trainer import PluginArg

__all__ = ["Engine"]

_T = TypeVar("_T")
_PRECISION_KEY = "xtrain_precision"  # the precision plugin's state in an engine.save checkpoint (the scaler's)


class Engine:
    """Accelerate a plain PyTorch training loop.

    Args:
        accelerator: As for the Trainer: ``"auto"``, a registered name or an Accelerator.
        strategy: As for the Trainer: ``"auto"``, a registered name or a Strategy.
        devices: As for the Trainer.
        num_nodes: As for the Trainer.
        precision: As for the Trainer.
        plugins: As for the Trainer.
        hang_timeout: As for the Trainer: seconds without progress (a batch from a set-up dataloader, a backward
            pass, a checkpoint write) before a multi-process run is reported as hung and ended; ``None``: off.
        on_nonfinite_loss: What :meth:`backward` does with a NaN/inf loss: ``"warn"`` (checked every 50 calls and
            at the end of each pass over a set-up dataloader, without a per-step sync), ``"raise"``
            (:class:`~xtrain.core.errors.NonFiniteLossError` before the backward) or ``"skip"`` (no backward, and
            the next ``optimizer.step()`` of the set-up optimizers does nothing, on every rank alike).

    Example::

        engine = Engine(accelerator="cpu", devices=2, strategy="ddp")
        engine.launch()
        model, optimizer = engine.setup(model, optimizer)
        loader = engine.setup_dataloaders(loader)
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            engine.backward(loss)
            optimizer.step()
    """

    def __init__(self, *, accelerator: str | Accelerator = "auto", strategy: str | Strategy = "auto",
                 devices: int | str | list[int] = "auto", num_nodes: int = 1,
                 precision: str | int | Precision | None = None, plugins: PluginArg | list[PluginArg] | None = None,
                 hang_timeout: float | timedelta | None = DEFAULT_HANG_TIMEOUT,
                 on_nonfinite_loss: NonFiniteMode = "warn") -> None:
        mode = check_nonfinite_mode(on_nonfinite_loss)
        self._strategy = resolve(accelerator=accelerator, devices=devices, num_nodes=num_nodes, strategy=strategy,
                                 precision=precision, plugins=plugins).strategy
        self._strategy.set_hang_timeout(parse_hang_timeout(hang_timeout))
        self._nonfinite = NonFiniteCheck(mode, every=50, hint=ENGINE_HINT,
                                         scaled_by=scaled_by(self._strategy.precision))
        self._where = [-1, -1]  # (epoch, batch) of the set-up dataloader iterated last; none yet
        self._passes: list[EngineLoader] = []
        self._backward_calls = 0
        self._launched = False
        self._failed = False
        self._modules: list[nn.Module] = []
        self._owners: dict[int, nn.Module] = {}

    def __getattr__(self, name: str) -> Any:
        """Only for names the Engine lacks: Accelerate's and Fabric's get the Engine's equivalent in the error."""
        from xtrain.core._internal.engine_hints import missing_engine_attribute

        raise missing_engine_attribute(name)

    # -- who and where ------------------------------------------------------------------------------------------
    @property
    def strategy(self) -> Strategy:
        return self._strategy

    @property
    def device(self) -> torch.device:
        return self._strategy.root_device

    @property
    def global_rank(self) -> int:
        return self._strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self._strategy.local_rank

    @property
    def node_rank(self) -> int:
        return self._strategy.node_rank

    @property
    def world_size(self) -> int:
        return self._strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        return self._strategy.is_global_zero

    # -- processes ------------------------------------------------------------------------------------------------
    @overload
    def launch(self, fn: None = None) -> None: ...
    @overload
    def launch(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T: ...
    def launch(self, fn: Callable[..., _T] | None = None, *args: Any, **kwargs: Any) -> _T | None:
        """Start the other processes and set up this one.

        With a re-executing launcher (``ddp``) call ``launch()`` near the top of your script: every rank runs the
        whole script. ``launch(main)`` runs ``main(engine, *args)`` on every rank; under a re-executing launcher each
        rank gets its own result back and goes on with the script (guard rank-0 work with :attr:`is_global_zero`),
        while spawn and fork strategies, which need the work as a function, return rank 0's result to the caller.
        """
        launcher = self._strategy.launcher
        if fn is None:
            if launcher is not None and not launcher.runs_in_caller:
                raise ConfigError("strategy", self._strategy.name, "starts its processes from a function (spawn or "
                                  "fork), so launch() needs one.",
                                  fix="put your loop in main(engine) and call engine.launch(main).")
            if launcher is not None:
                launcher.launch(self._setup_process)
            else:
                self._setup_process()
            return None
        if launcher is None:
            return self._run(fn, *args, **kwargs)
        return launcher.launch(self._run, fn, *args, **kwargs)  # type: ignore[no-any-return]

    def _setup_process(self) -> None:
        if self._launched:
            return
        self._launched = True
        self._strategy.setup_environment()
        strategy = self._strategy
        self._nonfinite.connect(gather=strategy.all_gather if strategy.world_size > 1 else None,
                                rank=strategy.global_rank)
        previous = sys.excepthook

        def report(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            self._failed = True
            self._strategy.on_exception(exc)
            previous(kind, exc, tb)

        sys.excepthook = report
        atexit.register(self._finish)

    def _finish(self) -> None:
        """At normal exit, every rank stops watching together (a crashed run is ended by the watchdog instead)."""
        if not self._failed:
            self._nonfinite.flush()
            self._strategy.teardown()

    def _run(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        self._setup_process()
        try:
            result = fn(self, *args, **kwargs)
        except BaseException as exc:
            self._failed = True
            self._strategy.on_exception(exc)
            raise
        self._strategy.teardown()
        return result

    def _require_launch(self) -> None:
        if not self._launched:
            if self._strategy.launcher is not None or self._strategy.world_size > 1:
                raise ConfigError("strategy", self._strategy.name, "runs several processes, and launch() was not "
                                  "called.", fix="call engine.launch() (or engine.launch(main)) before setup().")
            self._setup_process()

    # -- models, optimizers, data ---------------------------------------------------------------------------------
    @overload
    def setup(self, module: nn.Module) -> EngineModule: ...
    @overload
    def setup(self, module: nn.Module, *optimizers: torch.optim.Optimizer) -> tuple[Any, ...]: ...

    def setup(self, module: nn.Module, *optimizers: torch.optim.Optimizer) -> Any:
        """Convert, move and wrap ``module`` for the strategy and precision; set up its optimizers.

        Returns the wrapped module (call it like the original; ``.module`` is the original), followed by the
        optimizers when given. Sharded strategies need the optimizer created after :meth:`setup_module`.
        """
        _check_setup_arguments(module, optimizers)
        wrapped = self.setup_module(module)
        if not optimizers:
            return wrapped
        prepared = self.setup_optimizers(*optimizers)
        return (wrapped, *(prepared if isinstance(prepared, tuple) else (prepared,)))

    def setup_module(self, module: nn.Module) -> EngineModule:
        """Convert, move and wrap ``module``; create optimizers from the returned module's parameters."""
        self._require_launch()
        # torch.compile(module): compiled in place instead (as the Trainer does), so .module, state_dict and
        # checkpoints are the module's own, without the wrapper's "_orig_mod." prefix, as Fabric's.
        forward = self._strategy.setup(unwrap_compiled(module))
        original = self._strategy.module
        self._modules.append(original)
        return EngineModule(forward, original, self._strategy.precision)

    @overload
    def setup_optimizers(self, optimizer: torch.optim.Optimizer, /) -> torch.optim.Optimizer: ...
    @overload
    def setup_optimizers(self, *optimizers: torch.optim.Optimizer) -> tuple[torch.optim.Optimizer, ...]: ...

    def setup_optimizers(self, *optimizers: torch.optim.Optimizer) -> Any:
        """Prepare optimizers for the strategy (Horovod wraps them); returns them in the same order.

        Each is the object passed in unless the strategy wraps it. Its ``step()`` then goes through the strategy and
        the precision plugin, as the Trainer's step does: under ``16-mixed`` the gradients are unscaled first and a
        step whose gradients hold inf/NaN is skipped (the scale lowered). ``optimizer.step_was_skipped`` is
        ``True`` after a step that did not run (the scaler's skip, or ``on_nonfinite_loss="skip"``), as with
        Accelerate: a learning-rate scheduler may be held back for it.
        """
        prepared = self._strategy.setup_optimizers(list(optimizers))
        prepare_steps(prepared, self._strategy, self._nonfinite)
        for opt in prepared:
            # The module holding any of its parameters: a learnable value of its own (a temperature) may come first.
            mine = {id(p) for g in opt.param_groups for p in g["params"]}
            owner = next((m for m in self._modules if any(id(p) in mine for p in m.parameters())), None)
            if owner is not None:
                self._owners[id(opt)] = owner
        return prepared[0] if len(prepared) == 1 else tuple(prepared)

    def setup_dataloaders(self, *loaders: Any, use_distributed_sampler: bool = True,
                          move_to_device: bool = True) -> Any:
        """Shard each dataloader across ranks (a resumable distributed sampler) and move its batches to the device."""
        self._require_launch()
        move = move_to_device and self.device.type != "cpu"
        out = [EngineLoader(prepare_dataloader(dl, distributed=self._strategy.distributed_sampler_kwargs,
                                                use_distributed_sampler=use_distributed_sampler, training=True),
                             self._strategy, move=move, where=self._where, on_pass_end=self._nonfinite.flush,
                             passes=self._passes)
               for dl in loaders]
        return out[0] if len(out) == 1 else tuple(out)

    def to_device(self, obj: _T) -> _T:
        """Move a tensor, a module or a nested collection of tensors to :attr:`device`."""
        if isinstance(obj, nn.Module):
            return obj.to(self.device)  # type: ignore[return-value]
        return self._strategy.batch_to_device(obj)

    # -- the step ---------------------------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``loss.backward()`` through the precision (gradient scaling) and the strategy (gradient sync).

        ``args``/``kwargs`` go to ``loss.backward`` (``retain_graph=True``), as Accelerate's and Fabric's. A NaN/inf
        ``loss`` is handled as ``on_nonfinite_loss`` says; its message names the call (counted from 0) and the epoch
        and batch of the set-up dataloader iterated last.
        """
        step = self._backward_calls
        self._backward_calls = step + 1
        if self._nonfinite.see(loss, step, self._where[0], self._where[1]):
            return
        self._strategy.backward(loss, *args, **kwargs)
        PROGRESS.step("engine")

    def autocast(self) -> AbstractContextManager[Any]:
        """The precision's forward context, for code outside a set-up module's forward."""
        return self._strategy.precision.forward_context()

    def no_backward_sync(self, module: EngineModule, enabled: bool = True) -> AbstractContextManager[Any]:
        """Skip gradient synchronization in backward passes inside this context (gradient accumulation)."""
        if not isinstance(module, EngineModule):
            raise ConfigError("module", type(module).__name__, "is not a module engine.setup returned, so the Engine "
                              "cannot reach the gradient synchronisation wrapped around it.",
                              fix="pass the module engine.setup returned (model, not model.module).")
        return self._strategy.no_backward_sync(enabled, module=module.forward_module)

    def clip_gradients(self, module: EngineModule, optimizer: torch.optim.Optimizer, *,
                       max_norm: float | None = None, clip_val: float | None = None) -> torch.Tensor | None:
        """Clip gradients by total norm (``max_norm``) or value (``clip_val``), after unscaling them.

        Returns the total norm before clipping (by norm), or ``None``: by value, and after a backward that
        ``on_nonfinite_loss="skip"`` skipped (nothing is unscaled or clipped; the step that follows is skipped too).
        """
        if (max_norm is None) == (clip_val is None):
            raise ConfigError("max_norm", max_norm, "exactly one of max_norm and clip_val must be given.",
                              fix="pass max_norm=1.0 to clip by norm, or clip_val=0.5 to clip by value.")
        if self._nonfinite.last_skipped:
            return None
        algorithm: Literal["norm", "value"] = "norm" if max_norm is not None else "value"
        value = max_norm if max_norm is not None else clip_val
        assert value is not None
        return self._strategy.clip_gradients(optimizer, value=value, algorithm=algorithm)

    # -- collectives ------------------------------------------------------------------------------------------------
    def all_reduce(self, tensor: Any, reduce_op: ReduceOp = "mean") -> Any:
        """Reduce across ranks: a tensor, a plain number, or a nested collection of them (numbers become tensors
        on this rank's device first)."""
        return apply_to_tensors(self._sendable("all_reduce", tensor),
                                lambda t: self._strategy.reduce(t, op=reduce_op))

    def all_gather(self, tensor: Any) -> Any:
        """Stack every rank's value along a new first dimension: a tensor, a plain number, or a nested collection
        of them (numbers become tensors on this rank's device first). Every rank must send the same shapes,
        which is checked first (one small collective): :meth:`pad_across_processes` evens them out, and
        :meth:`gather_for_metrics` takes rows of any number."""
        data = self._sendable("all_gather", tensor)
        if self.world_size > 1:  # different shapes crash gloo, or return another rank's memory: refused on every rank
            apply_to_tensors(data, self._check_shapes)
        return apply_to_tensors(data, self._strategy.all_gather)

    def _check_shapes(self, tensor: torch.Tensor) -> torch.Tensor:
        signatures(self._strategy, tensor, method="all_gather", rows_may_differ=False)
        return tensor

    def _sendable(self, method: str, data: Any) -> Any:
        """``data`` with its numbers as tensors; a string or another object would silently come back as this
        rank's own value, so it is refused."""
        converted = numbers_to_tensors(data, self.device)
        others = other_leaves(converted)
        if others:
            raise ConfigError("tensor", others[0], f"is a {type(others[0]).__name__}, which engine.{method} cannot "
                              "send (only tensors and numbers, in any nesting, travel between ranks).",
                              fix="gather any picklable object with engine.gather_for_metrics(data, "
                                  "use_gather_object=True).")
        return converted

    def gather_for_metrics(self, data: Any, *, use_gather_object: bool = False) -> Any:
        """Every rank's evaluation outputs, joined, without the samples the distributed sampler counted twice.

        As Accelerate's: call it in the loop over a set-up dataloader with a batch's per-sample outputs (predictions,
        targets; a tensor or a nested collection of them). Tensors are concatenated along their first dimension
        (a 0-dim tensor gives one row per rank), and ranks may have different numbers of rows; other dimensions
        and dtypes must agree (checked on every rank). In the last batch of a pass, the rows of samples that the
        sampler repeated to give every rank as many are dropped, so a metric over all the gathered rows counts
        every sample once; only per-sample rows are trimmed (as many as the batch's samples: a batch's 0-dim sum
        holds real samples too and is kept whole). Rows come in the order the sampler drew
        them (the dataset's order for an unshuffled loader) when the ranks take every ``world_size``-th sample;
        a custom batch sampler's batches come rank after rank. In a single process ``data`` is returned as is.

        Args:
            data: Tensors, or with ``use_gather_object`` any picklable object (a list of strings, say).
            use_gather_object: Gather by pickling: lists and tuples are joined (repeats dropped), anything else
                comes back as a list with one entry per rank. Data holding strings or other objects is gathered
                so in any case, as Accelerate does.
        """
        if self.world_size == 1:
            return data
        layout, repeat = self._passes[-1].share() if self._passes else (None, None)
        if self._passes:
            self._passes[-1].warn_unsharded_stream()
        converted = numbers_to_tensors(data, self.device)
        if use_gather_object or other_leaves(converted):  # strings and other objects: pickled, as Accelerate does
            return gather_objects(self._strategy, data, layout=layout, repeat=repeat)
        return gather_rows(self._strategy, converted, layout=layout, repeat=repeat)

    def pad_across_processes(self, data: Any, *, dim: int = 0, pad_index: int | float = 0,
                             pad_first: bool = False) -> Any:
        """Pad each tensor of ``data`` along ``dim`` to the largest size any rank has there (Accelerate's), so
        that outputs of different lengths (generated sequences, say) can be gathered; every rank must call it."""
        return pad_to_largest(self._strategy, data, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def broadcast(self, obj: _T, src: int = 0) -> _T:
        return self._strategy.broadcast(obj, src)

    def barrier(self, name: str | None = None) -> None:
        self._strategy.barrier(name)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only."""
        if self.is_global_zero:
            print(*args, **kwargs)

    @contextmanager
    def rank_zero_first(self, *, local: bool = False) -> Iterator[None]:
        """Run the block on rank 0 first (a download, say), then on the other ranks, which wait for it.

        Args:
            local: Rank 0 of each machine goes first (for a file system that the machines do not share).
        """
        first = (self.local_rank if local else self.global_rank) == 0
        if not first:
            self.barrier("rank_zero_first")
        yield
        if first:
            self.barrier("rank_zero_first")

    @staticmethod
    def seed_everything(seed: int) -> int:
        return seed_everything(seed)

    # -- checkpoints ------------------------------------------------------------------------------------------------
    def save(self, path: str | Path, state: Mapping[str, Any]) -> None:
        """Save modules, optimizers and plain values through the strategy. Every rank must call it.

        Modules are stored unwrapped and optimizers keyed by parameter name, so the checkpoint loads under any
        strategy; a sharding strategy (``fsdp``) writes a directory in which every rank stores its shards. With a
        module or optimizer, the precision plugin's state goes along (``16-mixed``'s gradient scaler: its scale and
        growth tracker, as Accelerate's ``save_state``), so a resumed run scales as the uninterrupted one.
        """
        if isinstance(path, Mapping) and isinstance(state, (str, os.PathLike)):
            raise ConfigError("path", type(path).__name__, "comes first in engine.save(path, state): the arguments "
                              "are in Accelerate's order (save(obj, f)).",
                              fix=f"engine.save({str(state)!r}, state), on every rank.")
        self._nonfinite.flush()
        checkpoint: dict[str, Any] = {key: self._state_of(value) for key, value in state.items()}
        refuse_unloadable(checkpoint, path)
        if self._strategy.checkpoint_layout == "sharded" or any(
                isinstance(v, (nn.Module, torch.optim.Optimizer)) or _stateful(v) for v in state.values()):
            # Not for a plain dict (engine.save(path, model.state_dict())): as with Fabric, the file is then that
            # dict, which model.load_state_dict(torch.load(path)) reads without an unexpected key.
            checkpoint = {"xtrain": write_manifest(self._strategy, written_by="Engine"), **checkpoint}
            precision_state = self._strategy.precision.state_dict()
            if precision_state:
                checkpoint[_PRECISION_KEY] = precision_state
        self._strategy.save_checkpoint(checkpoint, path)
        self._strategy.checkpoint_io.settle()
        self._strategy.barrier("engine.save")

    def load(self, path: str | Path, state: dict[str, Any] | None = None, *, strict: bool = True) -> dict[str, Any]:
        """Load a checkpoint written by :meth:`save`; objects in ``state`` are restored in place.

        A sharded checkpoint from any world size is read straight into the modules' and optimizers' shards.
        Returns the checkpoint's entries that ``state`` did not name (everything when ``state`` is ``None``).
        """
        targets: dict[str, Any] = {key: unwrap(target) if isinstance(target, nn.Module) else target
                                   for key, target in (state or {}).items()
                                   if isinstance(target, (nn.Module, torch.optim.Optimizer))}
        checkpoint = self._strategy.load_checkpoint(path, targets=targets)
        manifest = checkpoint.pop("xtrain", None)
        precision = self._strategy.precision
        saved_precision = checkpoint.pop(_PRECISION_KEY, None)
        if not isinstance(manifest, dict) or manifest.get("precision") != precision.name:
            saved_precision = None  # written under another precision (a bf16 run has no scaler to restore)
        plan = self._plan_load(str(path), checkpoint, state or {}, strict=strict)
        if saved_precision is not None:
            plan.like(_PRECISION_KEY, saved_precision, precision.state_dict())
        plan.check()
        from xtrain.core._internal.restore_apply import apply_with_rollback, except_failed, extra_states, roll_back

        # The modules' extra states and the stateful objects (schedulers, samplers, user counters) first: user code
        # the plan cannot check, undone together if one refuses its state (or a module then refuses its weights).
        extras = [entry for key, target in (state or {}).items() if key in checkpoint and isinstance(target, nn.Module)
                  for entry in extra_states(unwrap(target), checkpoint[key])]
        stateful = [(key, target, checkpoint.pop(key)) for key, target in (state or {}).items()
                    if key in checkpoint and _stateful(target)]
        if saved_precision is not None:
            stateful.append((f"the precision {precision.name!r}", precision, saved_precision))
        undo = apply_with_rollback(str(path), [*extras, *stateful])
        try:
            self._load_targets(checkpoint, state or {}, strict=strict)
        except Exception as err:
            back = f"the stateful objects were put back{except_failed(roll_back(undo))}"
            raise CheckpointError(f"checkpoint {str(path)!r}: loading it failed ({type(err).__name__}: "
                                  f"{str(err)[:300]}); {back}, but a module or optimizer loaded before the error may "
                                  f"have changed: rebuild them before using them.") from err
        return checkpoint

    def _load_targets(self, checkpoint: dict[str, Any], state: dict[str, Any], *, strict: bool) -> None:
        """Load the modules and optimizers ``state`` names (popping their entries), and fill its dicts and values."""
        for key, target in state.items():
            if key not in checkpoint:
                continue
            saved = checkpoint.pop(key)
            if isinstance(target, nn.Module):
                self._strategy.load_module_state_dict(saved, strict=strict, module=unwrap(target))
            elif isinstance(target, torch.optim.Optimizer):
                self._strategy.load_optimizer_state_dict(target, saved, module=self._owner(target))
            elif isinstance(target, dict):
                target.update(saved)
            else:
                state[key] = saved

    def run_dir(self, root: str | Path, *, run_name: str | None = None) -> Path:
        """This run's checkpoint directory, ``root/<run identity>``, the same on every attempt of the run.

        The identity is ``run_name``, else the one the launcher gives (``XTRAIN_RUN_ID``, torchrun's run id,
        SLURM's job id); with none, a :class:`~xtrain.core.errors.ConfigError` says how to name the run.
        """
        from xtrain.core._internal.auto_resume import run_directory

        return run_directory(root, run_name)

    def resume(self, directory: str | Path, state: dict[str, Any], *, strict: bool = True) -> dict[str, Any] | None:
        """The Engine's ``ckpt_path="auto"``: load the newest complete checkpoint in ``directory`` into ``state``.

        Torn saves are skipped (and logged). Returns what :meth:`load` returns, or ``None`` (logged) when there is
        no checkpoint yet and the run starts fresh. Every rank must call it; rank 0 chooses.
        """
        from xtrain.core._internal.auto_resume import newest_in

        found = newest_in(directory) if self.is_global_zero else None
        chosen = self.broadcast(str(found) if found else None)
        if chosen is None:
            self.print(f"Engine.resume: no complete checkpoint in {directory}: starting fresh")
            return None
        self.print(f"Engine.resume: resuming from {chosen}")
        return self.load(chosen, state, strict=strict)

    def _plan_load(self, path: str, checkpoint: dict[str, Any], state: Mapping[str, Any], *,
                   strict: bool) -> RestorePlan:
        """Compare every entry ``state`` names with its target before anything is loaded (all or nothing)."""
        plan = RestorePlan(path)
        for key, target in state.items():
            if key not in checkpoint:
                if strict:
                    plan.problems.append(f"{key}: not in the checkpoint (it holds {', '.join(sorted(checkpoint))})")
                continue
            if isinstance(target, nn.Module):
                plan.module(checkpoint[key], unwrap(target), strict=strict, entry=key)
            elif isinstance(target, torch.optim.Optimizer):
                names = module_names(self._owner(target))
                plan.optimizers([checkpoint[key]], [target], [names])
            elif isinstance(target, dict) and not isinstance(checkpoint[key], dict):
                plan.problems.append(f"{key}: checkpoint holds a {type(checkpoint[key]).__name__}, not a dict")
            elif isinstance(target, torch.optim.lr_scheduler.LRScheduler):
                plan.scheduler(key, checkpoint[key], target)
            elif _stateful(target):
                plan.like(key, checkpoint[key], target.state_dict())
        if plan.problems and strict:
            plan.fixes.append("load only keys that were saved, into objects built as they were when saved (or pass "
                              "strict=False to skip missing and unexpected keys).")
        elif plan.problems:  # strict=False skips missing and unexpected keys, never a tensor of another shape
            plan.fixes.append("build the objects as they were when saved: strict=False skips missing and unexpected "
                              "keys, not tensors of another shape (drop those keys from the file's state first).")
        return plan

    def _owner(self, optimizer: torch.optim.Optimizer) -> nn.Module:
        owner = self._owners.get(id(optimizer))
        if owner is None:
            raise ConfigError("state", type(optimizer).__name__, "is an optimizer the Engine did not set up.",
                              fix="pass it through engine.setup(model, optimizer) or engine.setup_optimizers.")
        return owner

    def _state_of(self, value: Any) -> Any:
        if isinstance(value, nn.Module):
            return self._strategy.module_state_dict(module=unwrap(value))
        if isinstance(value, torch.optim.Optimizer):
            return self._strategy.optimizer_state_dict(value, module=self._owner(value))
        if _stateful(value):
            return value.state_dict()
        return value


def _check_setup_arguments(module: Any, optimizers: tuple[Any, ...]) -> None:
    """Refuse what ``accelerator.prepare`` takes and ``setup`` does not, before anything is set up."""
    if not isinstance(module, nn.Module):
        raise ConfigError("module", type(module).__name__, "is not a torch.nn.Module; setup takes the model first.",
                          fix="call engine.setup(model, optimizer); dataloaders go through engine.setup_dataloaders.")
    for value in optimizers:
        if not isinstance(value, torch.optim.Optimizer):
            raise ConfigError("optimizers", type(value).__name__, "is not a torch.optim.Optimizer: setup takes a "
                              "module and its optimizers only.",
                              fix="set up dataloaders with loader = engine.setup_dataloaders(loader); a learning-rate "
                                  "scheduler needs no setup (create it on the optimizer setup returns).")


def _stateful(value: Any) -> bool:
    """An object saved as its ``state_dict()`` and restored through ``load_state_dict`` (a scheduler, say)."""
    return (not isinstance(value, (nn.Module, torch.optim.Optimizer)) and callable(getattr(value, "state_dict", None))
            and callable(getattr(value, "load_state_dict", None)))
