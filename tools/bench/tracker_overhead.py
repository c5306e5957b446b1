"""Per-step cost of experiment trackers (W&B offline, MLflow on SQLite) against the CSV logger, in one run.

The task is step_overhead.py's (a 32-64-10 MLP, batch 64, SGD, one CPU thread). Every arm fits the same steps with
``log_every_n_steps`` (default 50, the Trainer's default, as in step_overhead.py's ``defaults`` arm) and a training loss logged every
step; the clock runs from ``on_train_start`` to ``on_train_end``, i.e. over the step loop only. Each tracker's run is
opened before the clock starts (``logger.experiment``), so its one-off start-up (seconds for W&B's service, MLflow's
database) is not charged to the steps; what remains is what the loop pays per logged step. The ``none`` arm
(``logger=False``) shows the loop without any logger; ``profiler`` is ``none`` with ``profiler="simple"``.

Arms run interleaved for several rounds; the script prints the median and minimum microseconds per step and the
ratio of each arm's median to the CSV arm's (the goal: trackers at most 1.10x).

Run:  python tools/bench/tracker_overhead.py [--steps 3000] [--rounds 5] [--every 50] [--arms none,csv,wandb,mlflow]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))
from step_overhead import task_data, task_net

from xtrain.core import Callback, Trainer, TrainModule


class LoopClock(Callback):
    """Measures the step loop alone (not setup, not the loggers' final flush)."""

    def __init__(self) -> None:
        self.elapsed = 0.0

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self._start = time.perf_counter()

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.elapsed = time.perf_counter() - self._start


class Tiny(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = task_net()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def make_logger(arm: str, root: str) -> Any:
    if arm in ("none", "profiler"):
        return False
    if arm == "csv":
        from xtrain.core.loggers import CSVLogger

        return CSVLogger(root)
    if arm == "wandb":
        from xtrain.core.loggers import WandbLogger

        logger = WandbLogger(save_dir=root, offline=True)
    else:
        from xtrain.core.loggers import MLFlowLogger

        logger = MLFlowLogger(save_dir=root, tracking_uri=f"sqlite:///{MLFLOW_DB}")
    logger.experiment  # noqa: B018 - open the run before the clock starts
    return logger


MLFLOW_DB = ""


def run(arm: str, steps: int, every: int) -> float:
    torch.manual_seed(0)
    module = Tiny()
    loader = DataLoader(task_data(), batch_size=64, shuffle=True)
    clock = LoopClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(max_steps=steps, default_root_dir=root, accelerator="cpu", devices=1,
                          logger=make_logger(arm, root), log_every_n_steps=every, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, callbacks=[clock],
                          profiler="simple" if arm == "profiler" else None)
        if arm == "profiler":
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                trainer.fit(module, loader)
        else:
            trainer.fit(module, loader)
    return clock.elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--arms", default="none,csv,wandb,mlflow,profiler")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("WANDB_SILENT", "true")
    global MLFLOW_DB
    store = tempfile.mkdtemp()
    MLFLOW_DB = str(Path(store) / "mlflow.db")
    os.environ.setdefault("WANDB_DATA_DIR", store)
    os.environ.setdefault("WANDB_CACHE_DIR", store)
    arms = [a for a in args.arms.split(",") if a]
    times: dict[str, list[float]] = {a: [] for a in arms}
    for arm in arms:  # warm-up round, not counted (creates the MLflow database, starts W&B's service)
        run(arm, min(args.steps, 300), args.every)
    for _ in range(args.rounds):
        for arm in arms:
            times[arm].append(run(arm, args.steps, args.every))
    base = statistics.median(times["csv"]) if "csv" in times else None
    print(f"tracker overhead: {args.steps} steps, logged every {args.every}, median/min of {args.rounds} rounds, "
          f"step loop only, torch {torch.__version__}, 1 thread")
    print(f"{'arm':10} {'median us/step':>15} {'min us/step':>12} {'vs csv':>8}")
    for arm in arms:
        med, low = statistics.median(times[arm]), min(times[arm])
        ratio = f"{med / base:8.3f}" if base else "       -"
        print(f"{arm:10} {med / args.steps * 1e6:15.1f} {low / args.steps * 1e6:12.1f} {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
