"""Freezing parts of a model and unfreezing them as training goes on (transfer learning)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["BackboneFinetuning", "BaseFinetuning"]

Modules = nn.Module | Iterable[nn.Module]


class BaseFinetuning(Callback):
    """Base class of finetuning schedules: freeze before training, unfreeze (adding parameter groups) later.

    Subclasses implement :meth:`freeze_before_training` (called at setup, before ``configure_optimizers``, so the
    optimizer can take only trainable parameters) and :meth:`finetune_function` (called at the start of every
    training epoch). Resuming replays :meth:`finetune_function` for the epochs already done before the optimizer's
    state is loaded, so the parameter groups match the checkpoint's.
    """

    def freeze_before_training(self, module: TrainModule) -> None:
        """Freeze what must not train at first (e.g. ``self.freeze(module.backbone)``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement freeze_before_training(module).")

    def finetune_function(self, module: TrainModule, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Unfreeze what should train from ``epoch`` on (e.g. with :meth:`unfreeze_and_add_param_group`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement finetune_function(module, epoch, optimizer).")

    # -- helpers ----------------------------------------------------------------------------------------------------
    @staticmethod
    def flatten_modules(modules: Modules) -> list[nn.Module]:
        """The leaf modules (modules without children) of ``modules``; a module with own parameters counts as one."""
        roots = [modules] if isinstance(modules, nn.Module) else list(modules)
        found: list[nn.Module] = []
        for root in roots:
            found += [m for m in root.modules() if not list(m.children()) or m._parameters]
        return list(dict.fromkeys(found))

    @staticmethod
    def filter_params(modules: Modules, *, train_bn: bool = True, requires_grad: bool = True) -> Iterator[nn.Parameter]:
        """The parameters of ``modules`` whose ``requires_grad`` equals ``requires_grad`` (batch norm's only if
        ``train_bn``)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and not train_bn:
                continue
            for param in module.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Unfreeze every parameter of ``modules`` (and put frozen batch norms back in training mode)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: nn.Module) -> None:
        """Freeze ``module``'s own parameters; a batch norm also stops updating its running statistics."""
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, *, train_bn: bool = True) -> None:
        """Freeze ``modules``; batch norms keep training when ``train_bn`` (the usual choice for finetuning)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def unfreeze_and_add_param_group(modules: Modules, optimizer: torch.optim.Optimizer, *, lr: float | None = None,
                                     initial_denom_lr: float = 10.0, train_bn: bool = True) -> None:
        """Unfreeze ``modules`` and give their parameters to ``optimizer`` as a new group.

        The group's learning rate is ``lr``, or the first group's current one divided by ``initial_denom_lr`` (a
        pretrained part starts slower than the fresh head). Parameters the optimizer already has are not added twice.
        """
        BaseFinetuning.make_trainable(modules)
        base_lr = optimizer.param_groups[0]["lr"]
        known = {id(p) for group in optimizer.param_groups for p in group["params"]}
        params = [p for p in BaseFinetuning.filter_params(modules, train_bn=train_bn) if id(p) not in known]
        if params:
            optimizer.add_param_group({"params": params, "lr": lr if lr is not None else base_lr / initial_denom_lr})

    # -- hooks ------------------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: Trainer, module: TrainModule, stage: str, /) -> None:
        if stage == "fit":
            self.freeze_before_training(module)

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self.finetune_function(module, trainer.current_epoch, trainer.optimizers[0])

    @override
    def on_load_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any], /) -> None:
        if trainer.state != "fit" or not trainer.optimizers:
            return
        loops = checkpoint.get("loops", {})
        done = int(loops.get("epoch", 0)) + (1 if int(loops.get("batches_in_epoch", 0)) > 0 else 0)
        for epoch in range(done):
            self.finetune_function(module, epoch, trainer.optimizers[0])


class BackboneFinetuning(BaseFinetuning):
    """Trains the head first, then unfreezes ``module.backbone`` at ``unfreeze_backbone_at_epoch``.

    The backbone's group starts at the current learning rate times ``backbone_initial_ratio_lr`` (or at
    ``backbone_initial_lr``) and is multiplied by ``lambda_func(epoch + 1)`` every following epoch, never above the
    head's learning rate unless ``should_align`` is off.

    Args:
        unfreeze_backbone_at_epoch: The epoch at which the backbone starts training.
        lambda_func: Factor applied to the backbone's learning rate each epoch after unfreezing; the default
            doubles it, as Lightning's ``multiplicative``.
        backbone_initial_ratio_lr: Backbone learning rate relative to the head's when unfrozen.
        backbone_initial_lr: An absolute learning rate instead of the ratio.
        should_align: Cap the backbone's learning rate at the head's.
        initial_denom_lr: Used by :meth:`unfreeze_and_add_param_group` when no rate is given.
        train_bn: Keep batch norms of the frozen backbone training.
    """

    def __init__(self, unfreeze_backbone_at_epoch: int = 10, *, lambda_func: Any = None,
                 backbone_initial_ratio_lr: float = 0.1, backbone_initial_lr: float | None = None,
                 should_align: bool = True, initial_denom_lr: float = 10.0, train_bn: bool = True) -> None:
        if not isinstance(unfreeze_backbone_at_epoch, int) or unfreeze_backbone_at_epoch < 0:
            raise ConfigError("unfreeze_backbone_at_epoch", unfreeze_backbone_at_epoch, "must be an epoch (int >= 0).",
                              fix="write unfreeze_backbone_at_epoch=10.")
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func if lambda_func is not None else _doubling
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.previous_backbone_lr: float | None = None

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"previous_backbone_lr": self.previous_backbone_lr}

    @override
    def load_state_dict(self, state: dict[str, Any], /) -> None:
        self.previous_backbone_lr = state.get("previous_backbone_lr")

    @staticmethod
    def _backbone(module: TrainModule) -> nn.Module:
        backbone = getattr(module, "backbone", None)
        if not isinstance(backbone, nn.Module):
            raise ConfigError("callbacks", "BackboneFinetuning", f"needs a `backbone` submodule on "
                              f"{type(module).__name__}.", fix="assign self.backbone = <the pretrained part>.")
        return backbone

    @override
    def freeze_before_training(self, module: TrainModule) -> None:
        self.freeze(self._backbone(module), train_bn=self.train_bn)

    @override
    def finetune_function(self, module: TrainModule, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        if epoch == self.unfreeze_backbone_at_epoch:
            head_lr = optimizer.param_groups[0]["lr"]
            initial = (self.backbone_initial_lr if self.backbone_initial_lr is not None
                       else head_lr * self.backbone_initial_ratio_lr)
            self.previous_backbone_lr = initial
            self.unfreeze_and_add_param_group(self._backbone(module), optimizer, lr=initial,
                                              initial_denom_lr=self.initial_denom_lr, train_bn=self.train_bn)
        elif epoch > self.unfreeze_backbone_at_epoch and self.previous_backbone_lr is not None:
            head_lr = optimizer.param_groups[0]["lr"]
            new_lr = self.previous_backbone_lr * float(self.lambda_func(epoch + 1))
            new_lr = min(new_lr, head_lr) if self.should_align else new_lr
            optimizer.param_groups[-1]["lr"] = new_lr
            self.previous_backbone_lr = new_lr


def _doubling(epoch: int) -> float:
    return 2.0
