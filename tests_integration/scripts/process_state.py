"""What a multi-process fit leaves in the process that called it; prints one ``STATE {json}`` line per finding.

Modes:
    ddp: run as a script with strategy="ddp" (every rank runs it): after two fits and ``del``, the Trainers and
        modules are freed and faulthandler is as before, in every rank.
    spawn: strategy="ddp_spawn" from the caller: the caller's environment is unchanged, the ranks train under the
        caller's deterministic mode and random state, and a KeyboardInterrupt in a rank fails the fit.
    interrupt: strategy="ddp_spawn"; SIGINT reaches the caller only (a notebook's "interrupt kernel") while the
        ranks train: the ranks end too.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import signal
import sys
import tempfile
import threading
import time
import weakref
from typing import Any

import torch

from xtrain.core import Callback, Trainer, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_loaders

_RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def report(**values: Any) -> None:
    line = "STATE " + json.dumps({"rank": os.environ.get("LOCAL_RANK", "caller"), **values}) + "\n"
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), line.encode())  # one write: ranks share the pipe, print() may split a line


def trainer(strategy: str, **kwargs: Any) -> Trainer:
    options: dict[str, Any] = {"max_epochs": 1, "limit_train_batches": 4, "limit_val_batches": 2, "logger": False,
                               "enable_progress_bar": False, "enable_model_summary": False,
                               "enable_checkpointing": False, "accelerator": "cpu", "devices": 2,
                               "strategy": strategy, "default_root_dir": tempfile.mkdtemp(), **kwargs}
    return Trainer(**options)


class FirstDraw(Callback):
    """Reports each rank's deterministic mode and its first random number."""

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        report(deterministic=torch.are_deterministic_algorithms_enabled(),
               warn_only=torch.is_deterministic_algorithms_warn_only_enabled(), draw=torch.rand(1).item())


class Interrupt(Callback):
    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_rank == 1:
            raise KeyboardInterrupt


class Slow(Callback):
    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        time.sleep(0.2)


def ddp() -> None:
    faulthandler.disable()
    refs = []
    for _ in range(2):
        module = TinyClassifier()
        fitted = trainer("ddp")
        fitted.fit(module, *tiny_loaders())
        refs += [weakref.ref(fitted), weakref.ref(module)]
        del fitted, module
    gc.collect()
    report(alive=sum(ref() is not None for ref in refs), faulthandler=faulthandler.is_enabled())


def spawn() -> None:
    before = {key: os.environ.get(key) for key in _RENDEZVOUS}
    seed_everything(11)
    trainer("ddp_spawn", deterministic="warn", callbacks=[FirstDraw()]).fit(TinyClassifier(), *tiny_loaders())
    torch.use_deterministic_algorithms(False)
    report(environ_unchanged={key: os.environ.get(key) for key in _RENDEZVOUS} == before)
    try:
        trainer("ddp_spawn", callbacks=[Interrupt()]).fit(TinyClassifier(), *tiny_loaders())
        report(interrupted="fit returned")
    except BaseException as err:  # noqa: BLE001 - what the caller sees is the finding
        report(interrupted=f"{type(err).__name__}: {err}")


def interrupt() -> None:
    # A shell starts background jobs with SIGINT ignored, and Python then leaves it so: take Ctrl-C as a notebook
    # kernel or a terminal's foreground job does.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    pid = os.getpid()
    threading.Timer(6.0, lambda: os.kill(pid, signal.SIGINT)).start()
    try:
        trainer("ddp_spawn", max_epochs=100, callbacks=[Slow()]).fit(TinyClassifier(), *tiny_loaders())
        report(raised="nothing")
    except KeyboardInterrupt:
        report(raised="KeyboardInterrupt")
    sent = time.monotonic()
    while time.monotonic() - sent < 10 and _ranks():
        time.sleep(0.2)
    report(ranks_left=len(_ranks()), seconds=round(time.monotonic() - sent, 1))


def _ranks() -> list[int]:
    """This process's live children, multiprocessing's resource tracker left out (read from /proc)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"resource_tracker" not in command:
            found.append(int(entry.name))
    return found


if __name__ == "__main__":
    {"ddp": ddp, "spawn": spawn, "interrupt": interrupt}[sys.argv[1]]()
