"""Averaged weights (EMA and the like) kept beside the trained ones, used for validation and saved in checkpoints."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError

if TYPE_CHECKING:
    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["EMAWeightAveraging", "WeightAveraging"]

_CHECKPOINT_KEY = "weight_averaging"


class WeightAveraging(Callback):
    """Maintains a :class:`torch.optim.swa_utils.AveragedModel` of the module while it trains.

    Why: an average of the weights along the trajectory usually generalizes better than the last weights. The
    average is what validation sees (the weights are swapped in for it and back after), what ``checkpoint["state_dict"]``
    holds (so ``load_from_checkpoint`` and evaluation get the averaged model), and what the module holds when fitting
    ends; a subclass with ``evaluates_average = False`` (SWA, as Lightning's) validates and saves the training weights
    instead. The other weights travel in the checkpoint too, so resuming continues both exactly. Every rank keeps its
    own average of identical weights, so the ranks agree without communicating.

    Subclasses decide when to update by overriding :meth:`should_update`; the default updates after every optimizer
    step.

    Args:
        device: Where the averaged copy lives (``None``: beside the module; ``"cpu"`` saves accelerator memory).
        use_buffers: Average the buffers too (batch-norm statistics); otherwise they are copied at creation.
        avg_fn: ``AveragedModel``'s per-parameter averaging function (default: the running mean).
        multi_avg_fn: ``AveragedModel``'s averaging function over lists of parameters (e.g.
            ``get_ema_multi_avg_fn(0.999)``).
    """

    reads_gradients: ClassVar[bool] = False
    #: Whether validation and ``checkpoint["state_dict"]`` see the average (Lightning's ``WeightAveraging``) or the
    #: training weights, with the average beside them in the checkpoint (Lightning's ``StochasticWeightAveraging``).
    evaluates_average: ClassVar[bool] = True

    def __init__(self, *, device: str | torch.device | None = None, use_buffers: bool = True,
                 avg_fn: Callable[..., Any] | None = None, multi_avg_fn: Callable[..., Any] | None = None) -> None:
        self.device = torch.device(device) if device is not None else None
        self.use_buffers = use_buffers
        self._avg_fn = avg_fn
        self._multi_avg_fn = multi_avg_fn
        self._average: AveragedModel | None = None
        self._last_step = -1
        self._swapped = False

    # -- what subclasses decide -----------------------------------------------------------------------------------
    def should_update(self, *, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to fold the current weights into the average after optimizer step ``step_idx`` (the 0-based
        index of the step just taken, ``global_step - 1``, as Lightning passes it) or at the end of training epoch
        ``epoch_idx``. Exactly one of the two is given."""
        return step_idx is not None

    # -- the averaged copy ----------------------------------------------------------------------------------------
    @property
    def averaged_model(self) -> nn.Module | None:
        """The averaged copy of the module (``None`` before fitting starts)."""
        return None if self._average is None else self._average.module

    @property
    def num_averaged(self) -> int:
        """How many weight snapshots the average holds."""
        return 0 if self._average is None else int(self._average.n_averaged)

    def _ensure(self, trainer: Trainer) -> AveragedModel:
        if self._average is None:
            if trainer.strategy.checkpoint_layout != "full":
                raise ConfigError("callbacks", type(self).__name__, f"keeps a full copy of the weights, which the "
                                  f"sharded strategy {trainer.strategy.name!r} does not have.",
                                  fix="use a strategy with full checkpoints (ddp, single_device) with weight averaging.")
            module = trainer.strategy.module
            # The module refers to its Trainer (and through it to process groups): never copy those.
            detached = copy.deepcopy(module, {id(trainer): None})
            self._average = AveragedModel(detached, device=self.device, avg_fn=self._avg_fn,
                                          multi_avg_fn=self._multi_avg_fn, use_buffers=self.use_buffers)
            self._average.requires_grad_(False)
        return self._average

    def _update(self, trainer: Trainer) -> None:
        self._ensure(trainer).update_parameters(trainer.strategy.module)

    def _pairs(self, module: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
        assert self._average is not None
        average = self._average.module
        pairs: list[tuple[torch.Tensor, torch.Tensor]] = list(zip(module.parameters(), average.parameters(),
                                                                  strict=True))
        if self.use_buffers:
            pairs += list(zip(module.buffers(), average.buffers(), strict=True))
        return pairs

    @torch.no_grad()
    def _swap(self, module: nn.Module) -> None:
        """Exchange the module's weights with the averaged ones, in place (parameter objects stay the same)."""
        for live, averaged in self._pairs(module):
            held = live.detach().clone()
            live.copy_(averaged)
            averaged.copy_(held)

    @torch.no_grad()
    def _transfer(self, module: nn.Module) -> None:
        for live, averaged in self._pairs(module):
            live.copy_(averaged)

    # -- hooks ------------------------------------------------------------------------------------------------------
    @override
    def on_fit_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        self._ensure(trainer)
        self._last_step = trainer.global_step

    @override
    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int, /) -> None:
        step = trainer.global_step
        if step != self._last_step:
            self._last_step = step
            if self.should_update(step_idx=step - 1):
                self._update(trainer)

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self.should_update(epoch_idx=trainer.current_epoch):
            self._update(trainer)

    @override
    def on_validation_start(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self.evaluates_average and trainer.state == "fit" and self.num_averaged > 0:
            self._swap(trainer.strategy.module)
            self._swapped = True

    @override
    def on_validation_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        if self._swapped:
            self._swap(trainer.strategy.module)
            self._swapped = False

    @override
    def on_fit_end(self, trainer: Trainer, module: TrainModule, /) -> None:
        # At fit end, after every checkpoint of the run was written with the training weights beside the average.
        if self.num_averaged > 0:
            self._transfer(trainer.strategy.module)

    @override
    def on_exception(self, trainer: Trainer, module: TrainModule, exception: BaseException, /) -> None:
        if self._swapped:  # failed during validation: leave the training weights in the module
            self._swap(trainer.strategy.module)
            self._swapped = False

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"num_averaged": self.num_averaged, "last_step": self._last_step}

    @override
    def load_state_dict(self, state: dict[str, Any], /) -> None:
        self._last_step = int(state.get("last_step", -1))

    @override
    def on_save_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any], /) -> None:
        if self.num_averaged == 0 or "state_dict" not in checkpoint:
            return
        assert self._average is not None
        training = checkpoint["state_dict"]
        averaged = self._average.module.state_dict()
        if not self.evaluates_average:
            checkpoint[_CHECKPOINT_KEY] = {"state_key": self.state_key, "n_averaged": self._average.n_averaged.detach().clone(),
                                           "average_state_dict": {k: v.detach() for k, v in averaged.items()}}
            return
        # The checkpoint's weights are the averaged ones; the training ones ride along so a resume continues both.
        checkpoint["state_dict"] = {key: averaged[key].detach().to(value.device) if isinstance(value, torch.Tensor)
                                    else value for key, value in training.items()}
        checkpoint[_CHECKPOINT_KEY] = {"state_key": self.state_key, "training_state_dict": training,
                                       "n_averaged": self._average.n_averaged.detach().clone()}

    @override
    def on_load_checkpoint(self, trainer: Trainer, module: TrainModule, checkpoint: dict[str, Any], /) -> None:
        saved = checkpoint.get(_CHECKPOINT_KEY)
        if not isinstance(saved, dict) or saved.get("state_key") != self.state_key or trainer.state != "fit":
            return  # evaluating from a checkpoint: its state_dict (the average) is what should be evaluated
        average = self._ensure(trainer)
        if "average_state_dict" in saved:  # the training weights are the checkpoint's, the average beside them
            average.module.load_state_dict(saved["average_state_dict"])
        else:
            average.module.load_state_dict(checkpoint["state_dict"])
            checkpoint["state_dict"] = saved["training_state_dict"]
        average.n_averaged.copy_(saved["n_averaged"])


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights, updated after optimizer steps.

    Args:
        decay: The weight of the old average in each update (``0.999``: the last ~1000 steps matter).
        update_every_n_steps: Update after the steps whose 0-based index is a multiple of n.
        update_starting_at_step: Do not update after steps with a 0-based index below this one.
        update_starting_at_epoch: Also update at the end of every epoch from this one on; as in Lightning this
            does not hold back the step updates.
        device: Where the averaged copy lives (``None``: beside the module).
        use_buffers: Average the buffers too.
    """

    def __init__(self, decay: float = 0.999, *, update_every_n_steps: int = 1, update_starting_at_step: int | None = None,
                 update_starting_at_epoch: int | None = None, device: str | torch.device | None = None,
                 use_buffers: bool = True) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ConfigError("decay", decay, "must be between 0 and 1.", fix="write decay=0.999.")
        if not isinstance(update_every_n_steps, int) or update_every_n_steps < 1:
            raise ConfigError("update_every_n_steps", update_every_n_steps, "must be a positive int.",
                              fix="write update_every_n_steps=1.")
        super().__init__(device=device, use_buffers=use_buffers, multi_avg_fn=get_ema_multi_avg_fn(decay))
        self.decay = decay
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    @override
    def should_update(self, *, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        # Lightning's rule: the step conditions and the epoch condition are independent triggers.
        if step_idx is not None and step_idx % self.update_every_n_steps == 0 and (
                self.update_starting_at_step is None or step_idx >= self.update_starting_at_step):
            return True
        return (epoch_idx is not None and self.update_starting_at_epoch is not None
                and epoch_idx >= self.update_starting_at_epoch)
