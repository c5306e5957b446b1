from __future__ import annotations

import csv
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import CheckpointError, ConfigError, ModelCheckpoint, Trainer, seed_everything
from xtrain.core.defaults.torch_io import TorchCheckpointIO
from xtrain.core.testing import CheckpointIOConformance, TinyClassifier, tiny_loaders


class Momentum(TinyClassifier):
    """Dropout (RNG in every step) and SGD momentum (optimizer state) make resume mistakes visible."""

    def __init__(self) -> None:
        super().__init__(lr=0.05, dropout=0.3)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)}


def run(root: Path, *, ckpt_path: str | None = None, callbacks: Any = None, **kwargs: Any) -> TinyClassifier:
    seed_everything(7)
    module = Momentum()
    train, val = tiny_loaders(batch_size=32)
    trainer = Trainer(default_root_dir=root, enable_progress_bar=False, enable_model_summary=False,
                      logger=False, callbacks=callbacks, **kwargs)
    trainer.fit(module, train, val, ckpt_path=ckpt_path)
    return module


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_resume_at_an_epoch_boundary_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    full = run(tmp_path / "full", max_epochs=4)
    run(tmp_path / "part", max_epochs=2)
    resumed = run(tmp_path / "part", max_epochs=4, ckpt_path="last")
    assert same_weights(full, resumed)
    assert not same_weights(full, run(tmp_path / "other", max_epochs=3))


def test_resume_mid_epoch_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    full = run(tmp_path / "full", max_epochs=2)
    every = ModelCheckpoint(every_n_train_steps=3, save_last=True, save_top_k=-1)
    run(tmp_path / "part", max_steps=5, callbacks=[every])  # stops after batch 5 of 8 in epoch 0
    ckpt = torch.load(tmp_path / "part" / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["loops"]["batches_in_epoch"] == 5 and ckpt["loops"]["epoch"] == 0
    resumed = run(tmp_path / "part", max_epochs=2, ckpt_path="last",
                  callbacks=[ModelCheckpoint(every_n_train_steps=3, save_last=True)])
    assert same_weights(full, resumed)


def test_resume_from_a_step_checkpoint_at_the_last_batch_of_an_epoch(tmp_path: Path,
                                                                    recwarn: pytest.WarningsRecorder) -> None:
    """Saved after the epoch's last step, before its end: resuming must run the next epoch in full (and the epoch
    scheduler's step, first thing after the resume, raises no torch warning about the order)."""
    full = run(tmp_path / "full", max_epochs=2)
    every = ModelCheckpoint(every_n_train_steps=8, save_last=True, save_top_k=0)  # 8 batches per epoch
    run(tmp_path / "part", max_steps=8, callbacks=[every])
    ckpt = torch.load(tmp_path / "part" / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["loops"]["batches_in_epoch"] == 8 and ckpt["loops"]["epoch"] == 0
    resumed = run(tmp_path / "part", max_epochs=2, ckpt_path="last",
                  callbacks=[ModelCheckpoint(every_n_train_steps=8, save_last=True, save_top_k=0)])
    assert same_weights(full, resumed)
    assert not [w for w in recwarn if "lr_scheduler.step()" in str(w.message)]


def test_checkpoint_contents_and_manifest(tmp_path: Path) -> None:
    run(tmp_path, max_epochs=1)
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert {"xtrain", "state_dict", "optimizer_states", "lr_schedulers", "precision", "loops", "callbacks", "rng",
            "hyper_parameters", "sampler"} <= set(ckpt)
    meta = ckpt["xtrain"]
    assert meta["format_version"] == 1 and meta["strategy"] == "single_device" and meta["world_size"] == 1
    assert meta["layout"] == "full" and "xtrain-core" in meta["versions"]
    assert ckpt["hyper_parameters"] == {"lr": 0.05, "dropout": 0.3, "features": 16, "classes": 4}
    assert ckpt["loops"] == {"epoch": 1, "global_step": 8, "batches_in_epoch": 0, "total_batches": 8}
    assert set(ckpt["optimizer_states"][0]["state"]) == {"net.0.weight", "net.0.bias", "net.3.weight", "net.3.bias"}


def test_ckpt_path_errors(tmp_path: Path) -> None:
    train, _ = tiny_loaders()
    trainer = Trainer(default_root_dir=tmp_path, max_steps=1, logger=False, enable_progress_bar=False)
    # As Lightning: "last" before any last.ckpt exists is not an error (a script passes it from its first run on).
    with pytest.warns(UserWarning, match="ckpt_path='last': there is no last checkpoint .*none is loaded"):
        trainer.fit(TinyClassifier(), train, ckpt_path="last")
    assert trainer.global_step == 1
    with pytest.raises(ConfigError, match=r"ckpt_path='missing\.ckpt': does not exist"):
        trainer.fit(TinyClassifier(), train, ckpt_path="missing.ckpt")
    fresh = Trainer(default_root_dir=tmp_path / "fresh", max_steps=1, logger=False, enable_progress_bar=False)
    with pytest.raises(ConfigError, match="ckpt_path='best': there is no best checkpoint"):
        fresh.validate(TinyClassifier(), tiny_loaders()[1], ckpt_path="best")


def test_model_checkpoint_keeps_the_best_k(tmp_path: Path) -> None:
    class Scripted(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("score", float([5, 1, 4, 2, 3][self.current_epoch]))

    cb = ModelCheckpoint(monitor="score", mode="min", save_top_k=2, filename="{epoch}-{score:.1f}")
    assert cb.dirpath is None and cb.kth_best_model_path == "" and cb.kth_value.item() == float("inf")
    train, val = tiny_loaders()
    Trainer(max_epochs=5, default_root_dir=tmp_path, callbacks=[cb], logger=False, enable_progress_bar=False,
            num_sanity_val_steps=0, limit_train_batches=2).fit(Scripted(), train, val)
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt"))
    assert names == ["epoch=1-score=1.0.ckpt", "epoch=3-score=2.0.ckpt"]
    assert cb.best_model_path.endswith("epoch=1-score=1.0.ckpt")
    assert cb.best_model_score is not None and cb.best_model_score.item() == 1.0  # a tensor, as in Lightning
    # As in Lightning: the kept file that goes next, and the directory the run used (it was not given)
    assert cb.kth_best_model_path.endswith("epoch=3-score=2.0.ckpt") and cb.kth_value.item() == 2.0
    assert cb.dirpath == tmp_path / "checkpoints" and sorted(p.name for p in cb.dirpath.iterdir()) == names
    assert cb.current_score is not None and cb.current_score.item() == 3.0  # the last epoch's, not kept
    state = cb.state_dict()  # Lightning's keys, as plain values (weights_only loading)
    assert state["monitor"] == "score" and state["current_score"] == 3.0 and state["kth_value"] == 2.0
    assert state["kth_best_model_path"].endswith("epoch=3-score=2.0.ckpt")
    again = ModelCheckpoint(monitor="score", mode="min", save_top_k=2)
    again.load_state_dict(state)
    assert again.current_score is not None and again.current_score.item() == 3.0


def test_a_relative_dirpath_gives_absolute_paths_as_lightning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cb = ModelCheckpoint(dirpath="ckpts")
    assert cb.dirpath == tmp_path.resolve() / "ckpts"
    train, _ = tiny_loaders()
    Trainer(max_steps=2, callbacks=[cb], logger=False, enable_progress_bar=False).fit(TinyClassifier(), train)
    monkeypatch.chdir("/")  # the script moves on: the paths still name the files
    assert Path(cb.best_model_path).is_absolute() and Path(cb.best_model_path).is_file()


def test_a_monitor_that_is_never_logged_is_a_config_error(tmp_path: Path) -> None:
    train, val = tiny_loaders()
    trainer = Trainer(max_epochs=1, default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                      callbacks=[ModelCheckpoint(monitor="val_los")])
    with pytest.raises(ConfigError) as info:
        trainer.fit(TinyClassifier(), train, val)
    assert str(info.value).startswith("monitor='val_los': is not among the logged metrics") and \
        "'val_loss'" in str(info.value)


_WRITER = """
import sys, torch
from xtrain.core.defaults.torch_io import TorchCheckpointIO
io, path, i = TorchCheckpointIO(), sys.argv[1], 0
print("ready", flush=True)
while True:
    i += 1
    io.save_checkpoint({"i": i, "w": torch.full((512, 1024), float(i))}, path)
"""


@pytest.mark.slow
def test_sigkill_during_saves_never_leaves_an_unreadable_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    rng = random.Random(0)
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3 + rng.random() * 0.7)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        loaded = TorchCheckpointIO().load_checkpoint(path)
        assert torch.equal(loaded["w"], torch.full((512, 1024), float(loaded["i"])))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"] or all(
        p.name.endswith(".tmp") or p.name == "last.ckpt" for p in tmp_path.iterdir())


class _Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {os.environ['XTRAIN_PWNED']}",))


def test_a_malicious_pickle_is_refused_and_never_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "pwned"
    monkeypatch.setenv("XTRAIN_PWNED", str(marker))
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": _Payload()}, path, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="refused unread") as info:
        TorchCheckpointIO().load_checkpoint(path)
    assert str(path) in str(info.value)
    assert not marker.exists()


def test_a_file_that_is_not_an_xtrain_checkpoint_is_named(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save({"weight": torch.ones(1)}, path)
    train, _ = tiny_loaders()
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    with pytest.raises(CheckpointError, match="is not an xtrain checkpoint"):
        trainer.fit(TinyClassifier(), train, ckpt_path=path)


class TestTorchCheckpointIO(CheckpointIOConformance):
    checkpoint_io = "torch"


class TestAsyncCheckpointIO(CheckpointIOConformance):
    checkpoint_io = "async"


_ASYNC_EXIT = """
import sys, torch
from xtrain.core.defaults import AsyncCheckpointIO
io = AsyncCheckpointIO()
io.save_checkpoint({"w": torch.full((2048, 2048), 3.0)}, sys.argv[1])
print("pending" if io.pending() else "done", flush=True)
"""


def test_async_save_is_never_lost_on_normal_exit(tmp_path: Path) -> None:
    path = tmp_path / "async.ckpt"
    out = subprocess.run([sys.executable, "-c", _ASYNC_EXIT, str(path)], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert out.strip() in ("pending", "done")
    assert torch.equal(TorchCheckpointIO().load_checkpoint(path)["w"], torch.full((2048, 2048), 3.0))


def test_async_save_snapshots_tensors_before_training_changes_them(tmp_path: Path) -> None:
    from xtrain.core.defaults import AsyncCheckpointIO

    io = AsyncCheckpointIO()
    live = torch.zeros(1000, 1000)
    io.save_checkpoint({"w": live}, tmp_path / "a.ckpt")
    live.add_(1.0)
    assert torch.equal(io.load_checkpoint(tmp_path / "a.ckpt")["w"], torch.zeros(1000, 1000))


def test_trainer_with_async_checkpoint_io_resumes(tmp_path: Path) -> None:
    train, val = tiny_loaders()
    Trainer(max_epochs=2, default_root_dir=tmp_path, plugins="async", logger=False,
            enable_progress_bar=False).fit(TinyClassifier(), train, val)
    ckpt = TorchCheckpointIO().load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert ckpt["loops"]["epoch"] == 2


def test_routine_saves_sync_in_the_background_and_are_in_place_when_fit_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ModelCheckpoint's epoch-end saves do not wait for fsync in the training thread; every file is renamed into
    place (and synced) by the time fit returns, and no temporary file is left."""
    import threading

    synced_in: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced_in.append(threading.current_thread().name), real_fsync(fd)))
    train, val = tiny_loaders()
    Trainer(max_epochs=3, default_root_dir=tmp_path, logger=False, enable_progress_bar=False).fit(
        TinyClassifier(), train, val)
    assert synced_in and set(synced_in) == {"xtrain-checkpoint-sync"}
    files = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert "last.ckpt" in files and not [f for f in files if f.endswith((".tmp", ".link"))], files
    assert TorchCheckpointIO().load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")["loops"]["epoch"] == 3


@pytest.mark.parametrize("io", ["torch", "async"])
def test_fits_leave_no_thread_behind(tmp_path: Path, io: str) -> None:
    """A sweep runs many fits in one process: each fit's checkpoint-sync thread (and any other xtrain thread) ends
    with it, also under AsyncCheckpointIO, and a save after fit still lands (it starts a new thread)."""
    import threading

    from xtrain.core.defaults import AsyncCheckpointIO

    def ours() -> list[str]:  # less the one import watcher of the process, started by its first plugin import
        return sorted(t.name for t in threading.enumerate()
                      if t.name.startswith("xtrain-") and t.name != "xtrain-import-watch")

    before = ours()
    train, val = tiny_loaders()
    for i in range(3):
        plugins = [AsyncCheckpointIO()] if io == "async" else None
        trainer = Trainer(max_epochs=2, default_root_dir=tmp_path / str(i), enable_progress_bar=False,
                          plugins=plugins)
        trainer.fit(TinyClassifier(), train, val)
        assert trainer.checkpoint_callback is not None
        assert Path(trainer.checkpoint_callback.last_model_path).is_file()
        assert ours() == before
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    trainer.strategy.checkpoint_io.wait()  # an asynchronous save may still be in flight when save_checkpoint returns
    assert TorchCheckpointIO().load_checkpoint(tmp_path / "after.ckpt")["loops"]["epoch"] == 2


def test_ctrl_c_during_a_save_raises_keyboard_interrupt_and_keeps_the_previous_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while torch.save writes through our (hashing) stream: torch's zip writer then fails with "unexpected
    pos" over the interrupt; the caller sees the KeyboardInterrupt (as with a plain torch.save), no temporary is
    left and the previous checkpoint is intact."""
    from xtrain.core._internal.integrity import HashingStream

    io = TorchCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"w": torch.zeros(4)}, path)
    io.wait()
    real_write = HashingStream.write
    calls = {"n": 0}

    def interrupted(self: Any, data: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_write(self, data)

    monkeypatch.setattr(HashingStream, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"w": torch.ones(1 << 16), "b": torch.ones(1 << 16)}, path)
    monkeypatch.undo()
    io.wait()
    assert calls["n"] >= 3 and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
    assert torch.equal(io.load_checkpoint(path)["w"], torch.zeros(4))


def test_trainer_save_checkpoint_returns_with_the_file_in_place(tmp_path: Path) -> None:
    train, val = tiny_loaders()
    trainer = Trainer(max_steps=2, default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                      enable_checkpointing=False)
    trainer.fit(TinyClassifier(), train, val)
    trainer.save_checkpoint(tmp_path / "manual.ckpt")
    assert (tmp_path / "manual.ckpt").is_file() and not list(tmp_path.glob(".manual.ckpt.*"))


def test_a_failed_background_sync_is_raised_at_the_next_save_and_keeps_the_previous_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    io = TorchCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"i": torch.tensor(1)}, path)
    io.wait()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    io.save_checkpoint({"i": torch.tensor(2)}, path)  # bytes written; the sync fails in the background
    with pytest.raises(CheckpointError, match="disk is full") as info:
        io.save_checkpoint({"i": torch.tensor(3)}, path)
    assert str(path) in str(info.value)
    monkeypatch.undo()
    assert int(io.load_checkpoint(path)["i"]) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_temporaries_of_killed_saves_are_removed_by_the_next_run(tmp_path: Path) -> None:
    from xtrain.core.defaults.torch_io import TorchCheckpointIO

    folder = tmp_path / "ck"
    folder.mkdir()
    dead = 2**22 + 7  # above Linux's largest pid: no such process
    names = {"stale": f".last.ckpt.{dead}-0.tmp", "stale_link": f".last.ckpt.{dead}.link",
             "fresh": f".last.ckpt.{dead}-1.tmp", "alive": ".last.ckpt.1-0.tmp", "other": ".hidden.tmp"}
    for key, name in names.items():
        (folder / name).write_bytes(b"partial checkpoint")
        if key != "fresh":
            os.utime(folder / name, (time.time() - 3600, time.time() - 3600))
    io = TorchCheckpointIO()
    io.save_checkpoint({"w": torch.ones(2)}, folder / "last.ckpt")
    io.wait()
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([names["fresh"], names["alive"], names["other"], "last.ckpt"]), left
    # A kill just before a resume leaves a temporary too young for the first save's sweep: a later save takes it.
    os.utime(folder / names["fresh"], (time.time() - 3600, time.time() - 3600))
    io.save_checkpoint({"w": torch.ones(2)}, folder / "last.ckpt")
    assert names["fresh"] in {p.name for p in folder.iterdir()}, "swept again at once: a scandir per save"
    io._swept[folder] -= 3600  # as if the last sweep were an hour ago
    io.save_checkpoint({"w": torch.ones(2)}, folder / "last.ckpt")
    io.wait()
    assert names["fresh"] not in {p.name for p in folder.iterdir()}


def test_resuming_from_a_file_never_deletes_that_file(tmp_path: Path) -> None:
    """A new Trainer resumed from the best checkpoint for more epochs (a tutorial's pattern) keeps it when a better
    one comes; Lightning writes the resumed run elsewhere, xtrain continues the run in place."""

    class Improving(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("score", float(10 - self.current_epoch))

    def trainer(epochs: int) -> Trainer:
        return Trainer(max_epochs=epochs, default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                       num_sanity_val_steps=0, limit_train_batches=2,
                       callbacks=[ModelCheckpoint(monitor="score", mode="min", save_top_k=1)])

    first = trainer(2)
    first.fit(Improving(), *tiny_loaders())
    best = first.checkpoint_callback.best_model_path  # type: ignore[union-attr]
    second = trainer(4)
    second.fit(Improving(), *tiny_loaders(), ckpt_path=best)
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("epoch=*.ckpt"))
    assert names == [Path(best).name, "epoch=3-step=8.ckpt"], "the resumed-from file stays; top-k pruned the rest"
    assert second.checkpoint_callback.best_model_path.endswith("epoch=3-step=8.ckpt")  # type: ignore[union-attr]


def test_a_logger_version_given_to_the_resumed_run_leaves_the_earlier_run_untouched(tmp_path: Path) -> None:
    from xtrain.core import CSVLogger

    def trainer(epochs: int, version: int | None) -> Trainer:
        return Trainer(max_epochs=epochs, logger=CSVLogger(tmp_path, version=version), enable_progress_bar=False,
                       num_sanity_val_steps=0, limit_train_batches=2, log_every_n_steps=1)

    first = trainer(2, None)
    first.fit(TinyClassifier(), *tiny_loaders())
    earlier = {p: p.read_bytes() for p in (tmp_path / "xtrain_logs" / "version_0").rglob("*") if p.is_file()}
    second = trainer(4, 1)
    second.fit(TinyClassifier(), *tiny_loaders(), ckpt_path=first.checkpoint_callback.last_model_path)  # type: ignore[union-attr]
    assert second.log_dir == str(tmp_path / "xtrain_logs" / "version_1")
    after = {p: p.read_bytes() for p in (tmp_path / "xtrain_logs" / "version_0").rglob("*") if p.is_file()}
    assert after == earlier, "the earlier run's logs and checkpoints are as it left them"
    with (tmp_path / "xtrain_logs" / "version_1" / "metrics.csv").open(newline="") as file:
        steps = [int(row["step"]) for row in csv.DictReader(file)]
    assert steps[0] == 4, steps  # continues the step count in its own file (batch 5's row: 4 steps before it)


def test_checkpoint_name_last_is_lightnings_attribute(tmp_path: Path) -> None:
    """``ModelCheckpoint.CHECKPOINT_NAME_LAST`` was silently ignored (found by an outside trial of a Lightning
    project): a plain name is used for the last checkpoint and found by ckpt_path="last"; a template, which
    Lightning accepts, is refused before training (the last checkpoint is found by its one name)."""
    callback = ModelCheckpoint(dirpath=tmp_path / "ck", save_last=True)
    callback.CHECKPOINT_NAME_LAST = "final"  # type: ignore[misc]
    trainer = Trainer(default_root_dir=tmp_path, max_steps=2, logger=False, enable_progress_bar=False, callbacks=[callback])
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    assert (tmp_path / "ck" / "final.ckpt").is_file() and not (tmp_path / "ck" / "last.ckpt").exists()
    again = ModelCheckpoint(dirpath=tmp_path / "ck", save_last=True)
    again.CHECKPOINT_NAME_LAST = "final"  # type: ignore[misc]
    resumed = Trainer(default_root_dir=tmp_path, max_steps=4, logger=False, enable_progress_bar=False, callbacks=[again])
    resumed.fit(TinyClassifier(), tiny_loaders(n=32)[0], ckpt_path="last")
    assert resumed.global_step == 4
    templated = ModelCheckpoint(dirpath=tmp_path / "t", save_last=True)
    templated.CHECKPOINT_NAME_LAST = "{epoch}-last"  # type: ignore[misc]
    module = TinyClassifier()
    with pytest.raises(ConfigError, match="CHECKPOINT_NAME_LAST='\\{epoch\\}-last'"):
        Trainer(default_root_dir=tmp_path, max_steps=2, logger=False, enable_progress_bar=False,
                callbacks=[templated]).fit(module, tiny_loaders(n=32)[0])
    assert module.losses == []
