"""The TrainModule services and overridable hooks that scripts written for Lightning 2.x rely on.

Kept apart from ``module.py`` so that the module's own contract stays short. Every hook here has a default that
does what the Trainer does when the hook is not overridden; the Trainer calls a hook only when a subclass
overrides it (see ``_internal/hook_overrides.py``), so the defaults cost nothing on the step path.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

import torch
from torch import nn

from xtrain.core._internal.apply import apply_to_tensors, move_to_device, numbers_to_tensors
from xtrain.core._internal.class_only import class_only

if TYPE_CHECKING:
    from xtrain.core.loggers.logger import Logger
    from xtrain.core.trainer import Trainer

__all__ = ["ModuleApiMixin"]


class ModuleApiMixin(nn.Module):
    """Properties, collectives, freezing, optimizer toggling, ``load_from_checkpoint`` and the override hooks."""

    def _attached_trainer(self) -> Trainer | None:
        found: Trainer | None = vars(self).get("_trainer")
        return found

    # -- loading ---------------------------------------------------------------------------------------------------
    @class_only
    def load_from_checkpoint(cls, checkpoint_path: str | Path, map_location: Any = None,
                             hparams_file: str | Path | None = None, strict: bool | None = None,
                             weights_only: bool | None = None, **kwargs: Any) -> Self:
        """Build the module from the hyperparameters saved in ``checkpoint_path`` and load its weights.

        The file is read with ``weights_only=True``, so it can never run code.

        Args:
            checkpoint_path: A checkpoint file written by the Trainer (or ``Trainer.save_checkpoint``).
            map_location: Where tensors go (``None``: where they were saved, or the CPU when that device is absent);
                the module is moved to the device of its loaded weights.
            hparams_file: A ``hparams.yaml`` (or ``.yml``/``.json``) whose values replace the hyperparameters saved
                in the checkpoint, as in Lightning; read with ``yaml.safe_load`` (it cannot build Python objects).
                The file loggers write one into the run's directory.
            strict: Require the checkpoint's keys to match the module's exactly (default: the module's
                ``strict_loading``, ``True`` unless it sets it, as in Lightning; ``False`` warns about the keys that
                differ).
            weights_only: Lightning's switch for ``torch.load``, accepted so that its calls run: xtrain reads every
                checkpoint with ``weights_only=True`` (``False`` warns that it is not honoured); it is never taken
                as a hyperparameter.
            kwargs: Constructor arguments that replace (or add to) the saved hyperparameters (and the file's).

        Raises:
            TypeError: Called on an instance (``model.load_from_checkpoint(path)`` would leave ``model`` unchanged), as
                in Lightning.
        """
        from xtrain.core._internal.load_from_checkpoint import load_module, warn_weights_only

        warn_weights_only(weights_only, f"{cls.__name__}.load_from_checkpoint")

        return load_module(cls, checkpoint_path, map_location=map_location, strict=strict, overrides=kwargs,
                           hparams_file=hparams_file)

    # -- where the module runs -------------------------------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        """The floating dtype of the module's parameters (torch's default dtype when it has none)."""
        return next((p.dtype for p in self.parameters() if p.is_floating_point()), torch.get_default_dtype())

    @property
    def local_rank(self) -> int:
        trainer = self._attached_trainer()
        return trainer.local_rank if trainer is not None else 0

    @property
    def loggers(self) -> list[Logger]:
        """The Trainer's loggers (empty when not attached or logging is off)."""
        trainer = self._attached_trainer()
        return list(trainer.loggers) if trainer is not None else []

    @property
    def logger(self) -> Logger | None:
        """The Trainer's first logger."""
        trainer = self._attached_trainer()
        return trainer.logger if trainer is not None else None

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Gather tensors (nested in lists, tuples, dicts) from every rank, stacked along a new first dimension.

        Plain numbers become tensors on the module's device; in a single process the data is otherwise returned as
        it is. With ``sync_grads`` gradients flow back through the gather to every rank's inputs.
        """
        trainer = self._attached_trainer()
        device = next((p.device for p in self.parameters()), torch.device("cpu"))
        data = numbers_to_tensors(data, device)
        if trainer is None or trainer.world_size == 1:
            return data
        if group is not None:
            from xtrain.core.errors import ConfigError

            raise ConfigError("group", group, "is not supported: all_gather gathers over every rank.",
                              fix="call all_gather(data) and select the ranks you need from the result.")
        strategy = trainer.strategy

        def gather(tensor: torch.Tensor) -> torch.Tensor:  # a 0-dim value gathers to (world_size,), as in Lightning
            if sync_grads:
                import torch.distributed.nn.functional as dist_fn

                return torch.stack(dist_fn.all_gather(tensor.contiguous()))
            return strategy.all_gather(tensor.contiguous())

        return apply_to_tensors(data, gather)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only."""
        trainer = self._attached_trainer()
        if trainer is None or trainer.is_global_zero:
            builtins.print(*args, **kwargs)

    # -- freezing and optimizer toggling ---------------------------------------------------------------------------
    def freeze(self) -> Self:
        """Turn off gradients for every parameter and switch to eval mode (for inference or a frozen backbone).
        Returns the module, as Lightning's (``model = Model.load_from_checkpoint(path).freeze()``)."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self) -> Self:
        """Undo :meth:`freeze`: gradients on for every parameter, train mode. Returns the module."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Let only ``optimizer``'s parameters receive gradients (e.g. the generator's step of a GAN).

        The other parameters get ``requires_grad=False`` until :meth:`untoggle_optimizer`, which restores every
        parameter's own setting.
        """
        raw = getattr(optimizer, "optimizer", optimizer)
        saved: dict[nn.Parameter, bool] = vars(self).setdefault("_toggled_requires_grad", {})
        mine = {id(p) for group in raw.param_groups for p in group["params"]}
        for param in self.parameters():
            saved.setdefault(param, param.requires_grad)
            if id(param) not in mine:
                param.requires_grad = False
            else:
                param.requires_grad = saved[param]

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Restore the ``requires_grad`` settings that :meth:`toggle_optimizer` changed."""
        saved: dict[nn.Parameter, bool] = vars(self).pop("_toggled_requires_grad", {})
        for param, requires_grad in saved.items():
            param.requires_grad = requires_grad

    @contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """:meth:`toggle_optimizer` for the duration of a ``with`` block."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    # -- override hooks (the Trainer calls them only when a subclass overrides them) -------------------------------
    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any,
                       optimizer_closure: Callable[[], Any] | None = None) -> None:
        """Step ``optimizer``; the closure runs ``training_step``, the zeroing of the gradients (a window's first
        batch) and the backward pass, and must be called (calling only the closure skips the update)."""
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        """Clear the gradients: inside the closure, after ``training_step`` and before the backward pass of each
        accumulation window's first batch, as Lightning."""
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step one scheduler (override for schedulers with another ``step`` signature)."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: Literal["norm", "value"] | None = None) -> None:
        """Clip before each optimizer step; by default with the Trainer's ``gradient_clip_val`` and algorithm."""
        if gradient_clip_val:
            trainer = self._attached_trainer()
            assert trainer is not None
            raw = getattr(optimizer, "optimizer", optimizer)
            trainer.strategy.clip_gradients(raw, value=gradient_clip_val, algorithm=gradient_clip_algorithm or "norm")

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move a batch to ``device`` (override for batches of custom types)."""
        return move_to_device(batch, device)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it moves to the device (e.g. CPU-side augmentation)."""
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch once it is on the device (e.g. GPU-side augmentation)."""
        return batch

    def on_validation_model_eval(self) -> None:
        self.eval()

    def on_validation_model_train(self) -> None:
        self.train()

    def on_test_model_eval(self) -> None:
        self.eval()

    def on_test_model_train(self) -> None:
        self.train()

    def on_predict_model_eval(self) -> None:
        self.eval()
