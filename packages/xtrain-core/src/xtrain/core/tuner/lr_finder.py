"""The learning-rate range test: train briefly while raising the learning rate, and read off a good one."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from typing_extensions import override

from xtrain.core.callbacks.callback import Callback
from xtrain.core.errors import ConfigError
from xtrain.core.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

    from xtrain.core.module import TrainModule
    from xtrain.core.trainer import Trainer

__all__ = ["LRFinder"]


@dataclass
class LRFinder:
    """The result of a range test: the learning rates tried and the (smoothed) loss at each.

    Attributes:
        lrs: The learning rate of each optimizer step.
        losses: The exponentially smoothed training loss after each step.
        stopped_early: Whether the loss diverged before ``num_training`` steps.
    """

    min_lr: float
    max_lr: float
    num_training: int
    mode: Literal["exponential", "linear"]
    lrs: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    stopped_early: bool = False

    @property
    def results(self) -> dict[str, list[float]]:
        """``{"lr": lrs, "loss": losses}``, as Lightning's ``_LRFinder.results``."""
        return {"lr": self.lrs, "loss": self.losses}

    def lr_at(self, step: int) -> float:
        """The learning rate the test uses at optimizer step ``step`` (0-based): ``min_lr``, then ``min_lr`` moved
        ``(step + 1) / num_training`` of the way to ``max_lr``, geometrically or linearly. This is Lightning's
        schedule exactly (its second step skips the ``1 / num_training`` point), so the curve and the suggestion
        match a Lightning run."""
        if step <= 0:
            return self.min_lr
        fraction = (step + 1) / max(self.num_training, 1)
        if self.mode == "linear":
            return self.min_lr + fraction * (self.max_lr - self.min_lr)
        return float(self.min_lr * (self.max_lr / self.min_lr) ** fraction)

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1, *, stacklevel: int = 2) -> float | None:
        """The learning rate where the smoothed loss has its steepest negative slope against the learning rate.

        ``skip_begin``/``skip_end`` ignore the noisy first and diverging last points. Computed as Lightning's
        (``torch.gradient`` over the rates), so both suggest the same rate; the arguments may be positional, as in
        Lightning. With fewer than two finite points left (a short test: the Trainer's ``max_epochs`` or the data
        ran out first) there is no suggestion: ``None``, with a warning saying why, as Lightning logs an error.
        ``stacklevel`` is the frame that warning names (2: the caller; code that asks on a user's behalf, such as
        ``Tuner.lr_find``, passes more so that it names the user's line).
        """
        import torch

        kept = [(i, lr, loss) for i, (lr, loss) in enumerate(zip(self.lrs, self.losses, strict=True))
                if skip_begin <= i < len(self.losses) - skip_end and math.isfinite(loss)]
        if len(kept) < 2:
            rank_zero_warn(f"lr_find: no suggestion: {len(kept)} finite loss value(s) of {len(self.losses)} are left "
                           f"after skip_begin={skip_begin} and skip_end={skip_end}, and the slope needs 2. Give the "
                           "range test more steps: a larger max_epochs on the Trainer, more data, or a larger "
                           "num_training.", stacklevel=stacklevel)
            return None
        losses = torch.tensor([loss for _, _, loss in kept], dtype=torch.float64)
        rates = torch.tensor([lr for _, lr, _ in kept], dtype=torch.float64)
        slopes = torch.gradient(losses, spacing=[rates])[0]
        return self.lrs[kept[int(torch.argmin(slopes))][0]]

    def plot(self, suggest: bool = False, show: bool = False, ax: Axes | None = None, *,
             path: str | Path | None = None) -> Figure | SubFigure:
        """Draw loss against learning rate (log scale for the exponential test) and return the figure.

        The first three parameters are Lightning's, in its order (positional on purpose, an exception to the
        project's keyword-only rule, so Lightning calls such as ``plot(True)`` keep working).

        Args:
            suggest: Mark the suggested rate with a red point.
            show: Show the figure in a window (``matplotlib.pyplot.show``).
            ax: Draw on these axes (the returned figure is theirs) instead of a new figure.
            path: Also save the figure there (PNG for ``.png``); an xtrain addition.

        Needs matplotlib: ``pip install "xtrain-core[tuner]"``. Without ``show`` no pyplot window machinery is used,
        so plotting works on a headless machine.
        """
        if isinstance(suggest, (str, os.PathLike)):
            raise ConfigError("suggest", str(suggest), "is a path, but plot's first parameter is Lightning's "
                              "suggest flag.", fix=f"write plot(path={str(suggest)!r}).")
        try:
            from matplotlib.figure import Figure
        except ImportError:
            raise ConfigError("plot", str(path) if path is not None else None, "needs matplotlib, which is not "
                              "installed.", fix='pip install "xtrain-core[tuner]"') from None
        figure: Figure | SubFigure
        if ax is not None:
            axes, figure = ax, ax.figure
        elif show:
            import matplotlib.pyplot as plt

            figure, axes = plt.subplots()
        else:
            figure = Figure(figsize=(6, 4))
            axes = figure.add_subplot()
        axes.plot(self.lrs, self.losses)
        if self.mode == "exponential":
            axes.set_xscale("log")
        axes.set_xlabel("learning rate")
        axes.set_ylabel("loss (smoothed)")
        best = self.suggestion(10, 1, stacklevel=3) if suggest else None
        if best is not None:
            index = self.lrs.index(best)
            axes.plot(best, self.losses[index], marker="o", markersize=8, color="red", label=f"suggested: {best:.2e}")
            axes.legend()
        if path is not None:
            (figure if isinstance(figure, Figure) else figure.figure).savefig(path)
        if show:
            import matplotlib.pyplot as plt

            plt.show()
        return figure


class RangeTest(Callback):
    """Sets the learning rate of each step and records the smoothed loss; stops once the loss diverges."""

    reads_gradients: ClassVar[bool] = False

    def __init__(self, result: LRFinder, *, early_stop_threshold: float | None, beta: float = 0.98) -> None:
        self.result = result
        self.early_stop_threshold = early_stop_threshold
        self.beta = beta
        self._average = 0.0
        self._best = math.inf
        self._recorded = 0

    @override
    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int, /) -> None:
        lr = self.result.lr_at(trainer.global_step)
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = lr

    @override
    def on_train_batch_end(self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any,
                           batch_idx: int, /) -> None:
        step = trainer.global_step
        loss_value = outputs["loss"] if isinstance(outputs, dict) else outputs
        if step <= self._recorded or loss_value is None:
            return  # accumulating: no optimizer step yet
        self._recorded = step
        loss = float(loss_value.detach())
        self._average = self.beta * self._average + (1 - self.beta) * loss
        # Lightning's bias correction, exponent included (step counts from 1 here, and it adds 1), so the curve
        # and the suggestion are the ones a Lightning user gets.
        smoothed = self._average / (1 - self.beta ** (step + 1))
        self.result.lrs.append(self.result.lr_at(step - 1))
        self.result.losses.append(smoothed)
        if not math.isfinite(smoothed) or (self.early_stop_threshold is not None and step > 1 and
                                           smoothed > self.early_stop_threshold * self._best):
            self.result.stopped_early = True
            trainer.should_stop = True
        self._best = min(self._best, smoothed)
