"""Restoring a Trainer from a checkpoint as one transaction: plan every entry, then apply them all.

The plan (:class:`~xtrain.core._internal.restore_plan.RestorePlan`, plus the strategy's own
:meth:`~xtrain.core.strategy.Strategy.restore_problems`) runs after the ``on_load_checkpoint`` hooks, which may
still edit the checkpoint, and before anything is loaded. Apply then loads the parts that run user code first
(callback and datamodule states, rolled back from snapshots if one refuses its state), then the parts the plan has
already proven loadable (module, optimizers, schedulers, precision, loop counters), then the loggers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from torch import nn

from xtrain.core._internal.manifest import check_manifest
from xtrain.core._internal.metric_objects import load_metric_states
from xtrain.core._internal.metric_resume import logged_state_problems
from xtrain.core._internal.restore_plan import STRICT_LOADING_FIX, RestorePlan, only_lacks_weights
from xtrain.core._internal.sampler import shuffle_generator
from xtrain.core._internal.state_dict import module_names
from xtrain.core.errors import CheckpointError

if TYPE_CHECKING:
    from xtrain.core.trainer import Trainer

__all__ = ["FITTING_WEIGHTS", "apply_with_rollback", "except_failed", "extra_states", "plan_restore",
           "restore_checkpoint", "roll_back", "short_repr"]

_EXTRA_STATE = "_extra_state"  # the key torch gives a module's get_extra_state() in its state dict
_FIT_ENTRIES = ("optimizer_states", "loops")
# Written by every Trainer checkpoint that is not weights-only: without them a resume would not be exact.
_RESUME_ENTRIES = ("lr_schedulers", "precision", "callbacks", "loggers", "rng")


FITTING_WEIGHTS = ("own = model.state_dict(); model.load_state_dict({k: v for k, v in read_checkpoint(path)"
                   "['state_dict'].items() if k in own and v.shape == own[k].shape}, strict=False)")

def restore_checkpoint(trainer: Trainer, checkpoint: dict[str, Any], path: str, *, fitting: bool,
                       configure_optimizers: Callable[[], None] | None = None) -> None:
    """Load module weights, and when ``fitting`` the optimizer, schedulers, loops, callbacks and loggers: all or none.

    ``configure_optimizers`` runs after the module's ``on_load_checkpoint`` (as Lightning: a layer the hook rebuilds
    from the checkpoint is then optimized, and its state restored) and before the callbacks' and the plan.
    """
    if not isinstance(checkpoint.get("xtrain"), dict) or "state_dict" not in checkpoint:
        from xtrain.core._internal.lightning_checkpoint import lightning_version, restore_lightning_weights

        version = lightning_version(checkpoint)
        if version is not None and not fitting:
            restore_lightning_weights(trainer, checkpoint, path)
            return
        raise CheckpointError(
            f"checkpoint {path!r} is not an xtrain checkpoint (it has no 'xtrain' manifest or no 'state_dict')"
            + (f", it was written by Lightning {version}: fit cannot resume from it, as its optimizer and loop "
               "states are Lightning's. Load its weights and hyperparameters with "
               "MyModule.load_from_checkpoint(path), then fit that module without ckpt_path (validate, test and "
               "predict take the file as ckpt_path)."
               + (" ckpt_path='last' chose it as the newest last*.ckpt of the checkpoint folder: pass "
                  "ckpt_path='auto', which skips files xtrain did not write, or give ModelCheckpoint another dirpath."
                  if trainer._ckpt_requested == "last" else "")
               if version is not None else
               ". Load plain state dicts with module.load_state_dict(torch.load(...))."))
    meta = check_manifest(checkpoint["xtrain"], path)
    absent = [key for key in _FIT_ENTRIES if key not in checkpoint]
    if fitting and absent:
        raise CheckpointError(
            f"checkpoint {path!r} holds weights only (no {' or '.join(absent)}), so a fit cannot resume from it "
            f"without silently restarting the optimizer and the epoch count. To start a new fit from its weights: "
            f"model = MyModule.load_from_checkpoint(path) (or model.load_state_dict(read_checkpoint(path)"
            f"['state_dict']) with xtrain.core.checkpoint_reader.read_checkpoint), then trainer.fit(model) without "
            f"ckpt_path. Pass it as ckpt_path to validate/test/predict to evaluate it.")
    lacking = [key for key in _RESUME_ENTRIES if key not in checkpoint]
    if fitting and lacking:
        raise CheckpointError(f"checkpoint {path!r} has no {', '.join(map(repr, lacking))} entr(ies), which every "
                              f"Trainer checkpoint holds; it is damaged or was not written by Trainer. Resume from "
                              f"another checkpoint, or load its weights only (read_checkpoint(path)['state_dict']).")
    trainer._hooks.call_module_first("on_load_checkpoint", checkpoint, between=configure_optimizers)
    plan_restore(trainer, checkpoint, path, fitting=fitting).check()
    strategy = trainer.strategy
    # Small states first, each undone if a later one refuses its state (the plan cannot foresee every object's
    # load_state_dict); then the weights the plan checked tensor by tensor; the loggers, which touch files, last.
    undo = apply_with_rollback(path, [*extra_states(strategy.module, checkpoint["state_dict"]),
                                       *_user_states(trainer, checkpoint, fitting=fitting),
                                       *_small_states(trainer, checkpoint, fitting=fitting)])
    load_weights(trainer, checkpoint["state_dict"], path, undo)
    if not fitting:
        return
    for opt, state in zip(trainer.optimizers, checkpoint["optimizer_states"], strict=True):
        strategy.load_optimizer_state_dict(opt, state)
    trainer._schedulers_resumed = bool(trainer.lr_scheduler_configs)
    # Saved after a counted batch (every save point is): its rows went out one step below the count.
    trainer._label_lag = 1 if trainer.global_step > 0 or trainer._progress.total_batches > 0 else 0
    for logger, state in zip(trainer.loggers, checkpoint.get("loggers", []), strict=False):
        logger.resume(state, step=trainer._logged_step())
    rng = checkpoint.get("rng")
    same_world = meta["world_size"] == strategy.world_size and isinstance(rng, list) and len(rng) == meta["world_size"]
    trainer._pending_rng = rng[strategy.global_rank] if rng and same_world else None
    if checkpoint.get("metric_states") and same_world:
        load_metric_states(trainer.module, checkpoint["metric_states"][strategy.global_rank])
    logged = checkpoint.get("logged")  # absent from checkpoints of xtrain-core < 2.0
    trainer._pending_logged = logged[strategy.global_rank] if isinstance(logged, list) and same_world else None
    trainer._pending_sampler = checkpoint.get("sampler")  # with its shuffle generator's state: set by the fit loop


def load_weights(trainer: Trainer, state: dict[str, Any], path: str,
                 undo: Sequence[tuple[str, Callable[[], None]]]) -> None:
    """The module's weights, last; if the module refuses them, the states applied before (``undo``) are put back."""
    try:
        trainer.strategy.load_module_state_dict(state, strict=strict_loading(trainer))
    except Exception as err:
        others = f"the run's other state was put back{except_failed(roll_back(undo))}"
        raise CheckpointError(f"checkpoint {path!r}: the module refused its weights ({type(err).__name__}: "
                              f"{str(err)[:300]}); {others}, but weights loaded before the error may have changed: "
                              f"rebuild the model before using it.") from err


def strict_loading(trainer: Trainer) -> bool:
    """The module's ``strict_loading`` (Lightning's switch for restoring a checkpoint that holds only some weights,
    e.g. the trainable ones of a fine-tune); strict unless the module turned it off."""
    return bool(trainer.module.strict_loading)


def plan_restore(trainer: Trainer, checkpoint: dict[str, Any], path: str, *, fitting: bool) -> RestorePlan:
    """Every difference between ``checkpoint`` and the run it is about to be loaded into; nothing is mutated."""
    strategy = trainer.strategy
    plan = RestorePlan(path)
    plan.module(checkpoint["state_dict"], strategy.module, strict=strict_loading(trainer))
    module_problems = len(plan.problems)
    plan.problems.extend(strategy.restore_problems(checkpoint, fitting=fitting))
    if fitting:
        names = module_names(strategy.module)
        plan.optimizers(checkpoint["optimizer_states"], trainer.optimizers, [names] * len(trainer.optimizers))
        schedulers = checkpoint["lr_schedulers"]
        plan.states("lr_schedulers", schedulers, len(trainer.lr_scheduler_configs))
        for i, (saved, config) in enumerate(zip(schedulers if isinstance(schedulers, list) else [],
                                                trainer.lr_scheduler_configs, strict=False)):
            plan.scheduler(f"lr_schedulers[{i}]", saved, config.scheduler)
        if checkpoint["xtrain"].get("precision") == strategy.precision.name:
            # Checkpoints move between precisions (a bf16 one has no fp16 scaler state); the same one must fit.
            plan.like("precision", checkpoint["precision"], strategy.precision.state_dict())
        plan.loops(checkpoint["loops"])
        plan.entries(checkpoint, {"precision": dict, "callbacks": dict, "loggers": list, "rng": list,
                                  "sampler": (dict, type(None)), "datamodule": dict})
        plan.states("callbacks", checkpoint["callbacks"])
        plan.states("loggers", checkpoint["loggers"])
        saved_loggers = checkpoint["loggers"] if isinstance(checkpoint["loggers"], list) else []
        for i, (logger, state) in enumerate(zip(trainer.loggers, saved_loggers, strict=False)):
            if isinstance(state, dict):
                plan.problems.extend(f"loggers[{i}] ({type(logger).__name__}): {problem}"
                                     for problem in logger.resume_problems(state))
        for name, target, saved in _user_states(trainer, checkpoint, fitting=True):
            plan.like(name, saved, target.state_dict())
        rng, world = checkpoint.get("rng"), checkpoint["xtrain"]["world_size"]
        if isinstance(rng, list) and len(rng) != world:
            plan.problems.append(f"rng: {len(rng)} rank state(s), but the manifest says world_size={world}")
        elif isinstance(rng, list) and world == strategy.world_size:
            plan.rng(rng[strategy.global_rank])
        logged = checkpoint.get("logged")
        if logged is not None and (not isinstance(logged, list) or len(logged) != world):
            plan.problems.append(f"logged: not one state per rank of world_size={world}")
        elif logged is not None and world == strategy.world_size:
            plan.problems.extend(f"logged[{strategy.global_rank}]: {problem}"
                                 for problem in logged_state_problems(logged[strategy.global_rank]))
        plan.sampler(checkpoint.get("sampler"), shuffle_generator(trainer._loaders.get("train")))
    else:
        for name, target, saved in _user_states(trainer, checkpoint, fitting=False):
            plan.like(name, saved, target.state_dict())
    hparams = checkpoint.get("hyper_parameters")
    if plan.problems and strict_loading(trainer) and only_lacks_weights(checkpoint["state_dict"], strategy.module):
        if len(plan.problems) == module_problems:  # the optimizer states fit too: a non-strict load is the fix
            plan.fixes.append(STRICT_LOADING_FIX)
    elif plan.problems and isinstance(hparams, dict) and hparams:
        plan.fixes.append(f"it was made with the hyperparameters {short_repr(hparams)}: build the model with them "
                          f"(MyModule.load_from_checkpoint(path) does).")
    if plan.problems:
        plan.fixes.append(f"To load only the weights that fit (strict=False alone still refuses other shapes): "
                          f"`{FITTING_WEIGHTS}` (from xtrain.core.checkpoint_reader import read_checkpoint), then fit "
                          f"without ckpt_path.")
    return plan


def _user_states(trainer: Trainer, checkpoint: dict[str, Any], *, fitting: bool) -> list[tuple[str, Any, Any]]:
    """``(name, object, state)`` for every state whose loading runs user code: the callbacks' when ``fitting``, the
    datamodule's at every stage (as Lightning: ``test(ckpt_path=...)`` calls ``DataModule.load_state_dict``)."""
    found: list[tuple[str, Any, Any]] = []
    if fitting:
        states = checkpoint.get("callbacks")
        states = states if isinstance(states, dict) else {}
        found = [(f"callback {cb.state_key!r}", cb, states[cb.state_key])
                 for cb in trainer.callbacks if cb.state_key in states]
    if trainer.datamodule is not None and "datamodule" in checkpoint:
        found.append(("the datamodule", trainer.datamodule, checkpoint["datamodule"]))
    return found


def short_repr(value: Any) -> str:
    """``repr`` for a message, bounded in depth and length (a file's nested hyperparameters must not recurse)."""
    import reprlib

    short = reprlib.Repr()
    short.maxlevel, short.maxdict, short.maxlist, short.maxstring, short.maxother = 3, 20, 10, 80, 80
    return short.repr(value)


def _small_states(trainer: Trainer, checkpoint: dict[str, Any], *, fitting: bool) -> list[tuple[str, Any, Any]]:
    """``(name, object, state)`` of the schedulers, the precision and the loop counters, when ``fitting``."""
    if not fitting:
        return []
    found: list[tuple[str, Any, Any]] = [
        (f"lr_schedulers[{i}]", config.scheduler, state)
        for i, (config, state) in enumerate(zip(trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", []),
                                                strict=False))]
    found.append(("precision", trainer.strategy.precision, checkpoint.get("precision", {})))
    found.append(("loops", trainer._progress, checkpoint["loops"]))
    return found


def apply_with_rollback(path: str, targets: list[tuple[str, Any, Any]]) -> list[tuple[str, Callable[[], None]]]:
    """``target.load_state_dict(state)`` for each ``(name, target, state)``; if one refuses, undo those before it.

    The refusing target is put back too (its ``load_state_dict`` may have set some fields before raising). Putting a
    state back runs user code that can fail as well (a callback whose fresh ``state_dict()`` its own
    ``load_state_dict`` cannot take): every state is still tried, so one failed undo does not leave the states
    before it loaded, and the :class:`CheckpointError` names those that could not be put back.

    Returns the ``(name, step)`` pairs that undo them all, for a caller whose next step may still fail (pass them to
    :func:`roll_back`).
    """
    undo: list[tuple[str, Callable[[], None]]] = []
    for name, target, state in targets:
        before = target.state_dict()
        try:
            target.load_state_dict(state)
        except Exception as err:
            failed = roll_back([*undo, (name, _restorer(target, before))])
            raise CheckpointError(f"checkpoint {path!r}: {name} refused its saved state ({type(err).__name__}: "
                                  f"{str(err)[:300]}); {_outcome(failed)}") from err
        undo.append((name, _restorer(target, before)))
    return undo


def _outcome(failed: list[str]) -> str:
    """What a refused restore left behind, for its message."""
    if not failed:
        return "nothing was loaded."
    return (f"the other states were put back, but putting back the state of {'; '.join(failed)} failed: it may now hold "
            f"the checkpoint's state or a partial one. Rebuild it (e.g. new callbacks and a new Trainer) before use.")


class _ExtraState:
    """A submodule's ``get_extra_state``/``set_extra_state`` seen as ``state_dict``/``load_state_dict``."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def state_dict(self) -> Any:
        return self.module.get_extra_state()

    def load_state_dict(self, state: Any) -> None:
        self.module.set_extra_state(state)


def extra_states(module: nn.Module, state: Any) -> list[tuple[str, Any, Any]]:
    """``(name, target, value)`` for each submodule whose extra state ``state`` holds.

    ``set_extra_state`` is user code that the plan cannot check: torch calls it in the middle of
    ``load_state_dict``, after the weights before it were copied. Applied first, with rollback, a refusal leaves the
    module as it was (the weights' load then sets the same value again).
    """
    if not isinstance(state, dict):
        return []
    found: list[tuple[str, Any, Any]] = []
    for name, sub in module.named_modules():
        key = f"{name}.{_EXTRA_STATE}" if name else _EXTRA_STATE
        if key in state and type(sub).get_extra_state is not nn.Module.get_extra_state:
            found.append((f"state_dict: {key}", _ExtraState(sub), state[key]))
    return found


def roll_back(undo: Sequence[tuple[str, Callable[[], None]]]) -> list[str]:
    """Run the ``(name, step)`` pairs :func:`apply_with_rollback` returned, newest first.

    Every step runs even when one raises: stopping at the first would leave the states before it loaded. Returns
    ``"<name> (<error>)"`` for each step that failed, for the caller's message (see :func:`except_failed`).
    """
    failed: list[str] = []
    for name, step in reversed(undo):
        try:
            step()
        except Exception as err:  # noqa: BLE001 - every failure is reported, none stops the others
            failed.append(f"{name} ({type(err).__name__}: {str(err)[:120]})")
    return failed


def except_failed(failed: list[str]) -> str:
    """``" except <the states roll_back could not put back>"``, or nothing, to follow "... was put back"."""
    return f" except {'; '.join(failed)}" if failed else ""


def _restorer(target: Any, before: Any) -> Callable[[], None]:
    return lambda: target.load_state_dict(before)
