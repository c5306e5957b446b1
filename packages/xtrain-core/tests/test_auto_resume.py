"""ckpt_path="auto": which run, which checkpoint (complete ones only), and the settings around restarts.

The restarts themselves (real processes, the xtrain launcher and torchrun) are in tests_integration/test_self_healing.py.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch

from checkpoint_helpers import to_sharded
from xtrain.core import ConfigError, Engine, Trainer, seed_everything
from xtrain.core._internal.auto_resume import newest_complete
from xtrain.core._internal.elastic import adapt_to_world_size
from xtrain.core.restarts import RUN_ID_ENV, RunIdentity, read_failure, run_identity, write_failure
from xtrain.core.sharded_checkpoint import MANIFEST_FILE
from xtrain.core.testing import TinyClassifier, tiny_loaders

_IDS = (RUN_ID_ENV, "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")


@pytest.fixture(autouse=True)
def no_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _IDS:
        monkeypatch.delenv(name, raising=False)


def fit(root: Path, *, max_steps: int, **kwargs: Any) -> Trainer:
    seed_everything(3)
    trainer = Trainer(default_root_dir=root, max_steps=max_steps, enable_progress_bar=False,
                      enable_model_summary=False, accelerator="cpu", devices=1, num_sanity_val_steps=0,
                      logger=kwargs.pop("logger", True), **kwargs)
    trainer.fit(TinyClassifier(), tiny_loaders(n=64)[0], ckpt_path="auto")
    return trainer


def test_identity_comes_from_the_name_then_the_launchers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_identity() is None
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default when --rdzv-id is not given
    assert run_identity() is None
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    assert run_identity() == RunIdentity("slurm-77", "SLURM_JOB_ID")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job/1")
    assert run_identity() == RunIdentity("torchelastic-job_1", "TORCHELASTIC_RUN_ID")
    monkeypatch.setenv(RUN_ID_ENV, "group-9")
    assert run_identity() == RunIdentity("group-9", RUN_ID_ENV)
    assert run_identity("mine") == RunIdentity("mine", "run_name")


def test_auto_without_anything_naming_the_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ckpt_path='auto'.*nothing names this run.*run_name="):
        fit(tmp_path, max_steps=1)
    assert not (tmp_path / "xtrain_logs").exists(), "refused before anything ran"


def test_bad_settings_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_restarts"):
        Trainer(max_restarts=-1)
    with pytest.raises(ConfigError, match="keep_global_batch"):
        Trainer(on_world_size_change="halve")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"max_restarts=2.*needs a launcher.*torchrun"):
        fit(tmp_path, max_steps=1, run_name="a", max_restarts=2)  # one device, no launcher to restart
    with pytest.raises(ConfigError, match="resumes a fit"):
        Trainer(run_name="a", accelerator="cpu", logger=False).validate(
            TinyClassifier(), tiny_loaders(n=16)[1], ckpt_path="auto")


def test_fresh_then_resumed_in_the_same_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = fit(tmp_path, max_steps=2, run_name="exp")
    assert "ckpt_path='auto': no complete checkpoint of run 'exp'" in capsys.readouterr().out
    assert first.log_dir == str(tmp_path / "xtrain_logs" / "exp")
    second = fit(tmp_path, max_steps=4, run_name="exp")
    out = capsys.readouterr().out
    assert "ckpt_path='auto': resuming run 'exp' (from run_name) from" in out and "last.ckpt" in out
    assert second.global_step == 4 and second.log_dir == first.log_dir
    assert sorted(p.name for p in (tmp_path / "xtrain_logs").iterdir()) == ["exp"], "no version_N per restart"


def test_two_runs_sharing_a_root_never_take_each_others_checkpoints(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    fit(tmp_path, max_steps=3, run_name="a")
    capsys.readouterr()
    other = fit(tmp_path, max_steps=2, run_name="b")
    assert "no complete checkpoint of run 'b'" in capsys.readouterr().out
    assert other.global_step == 2
    a = torch.load(tmp_path / "xtrain_logs" / "a" / "checkpoints" / "last.ckpt", weights_only=True)
    assert a["global_step"] == 3, "run a's checkpoint is untouched"


def test_environment_identity_names_the_logger_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    trainer = fit(tmp_path, max_steps=1)
    assert trainer.log_dir == str(tmp_path / "xtrain_logs" / "slurm-4242")


def test_a_torn_newest_file_is_skipped_with_a_log_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fit(tmp_path, max_steps=2, run_name="exp")
    folder = tmp_path / "xtrain_logs" / "exp" / "checkpoints"
    good = folder / "last.ckpt"
    torn = folder / "zz-newer.ckpt"
    torn.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    os.utime(torn, ns=(good.stat().st_mtime_ns + 10**9,) * 2)
    capsys.readouterr()
    resumed = fit(tmp_path, max_steps=3, run_name="exp")
    out = capsys.readouterr().out
    assert f"skipping {torn}: not a complete checkpoint" in out and f"from {good}" in out
    assert resumed.global_step == 3


def test_weights_only_checkpoints_cannot_resume_a_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = fit(tmp_path, max_steps=2, run_name="exp")
    newer = tmp_path / "xtrain_logs" / "exp" / "checkpoints" / "weights.ckpt"
    trainer.save_checkpoint(newer, weights_only=True)
    assert newest_complete([newer, newer.with_name("last.ckpt")], need="loops") == newer.with_name("last.ckpt")
    assert "has no 'loops' entry" in capsys.readouterr().out


def test_sharded_directories_count_only_with_their_manifest(tmp_path: Path) -> None:
    fit(tmp_path, max_steps=2, run_name="exp")
    full = tmp_path / "xtrain_logs" / "exp" / "checkpoints" / "last.ckpt"
    complete = to_sharded(full, tmp_path / "sharded" / "a.ckpt")
    torn = to_sharded(full, tmp_path / "sharded" / "b.ckpt")
    (torn / MANIFEST_FILE).unlink()  # a save interrupted before the manifest: the last thing written
    os.utime(torn, ns=(complete.stat().st_mtime_ns + 10**9,) * 2)
    assert newest_complete([complete, torn], need="loops") == complete
    shutil.rmtree(complete)
    assert newest_complete([torn]) is None


def test_engine_resume_from_its_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine(accelerator="cpu", devices=1)
    engine.launch()
    with pytest.raises(ConfigError, match="run_name"):
        engine.run_dir(tmp_path)
    folder = engine.run_dir(tmp_path, run_name="eng")
    assert folder == tmp_path / "eng"
    model = torch.nn.Linear(2, 2)
    assert engine.resume(folder, {"model": model}) is None
    assert "starting fresh" in capsys.readouterr().out
    engine.save(folder / "step-1.ckpt", {"model": model, "step": 1})
    (folder / "step-2.ckpt").write_bytes(b"torn")
    other = torch.nn.Linear(2, 2)
    rest = engine.resume(folder, {"model": other})
    assert rest == {"step": 1} and torch.equal(other.weight, model.weight)
    assert "skipping" in capsys.readouterr().out


def test_failure_records_keep_the_start_of_the_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_failure(rank=0, step=None, start_step=5)  # no launcher asked: nothing written
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("XTRAIN_FAILURE_DIR", str(tmp_path))
    write_failure(rank=1, step=None, start_step=5)
    write_failure(rank=1, step=7, start_step=None, error="RuntimeError: bug")
    record = read_failure(tmp_path, 1)
    assert record is not None and (record.step, record.start_step, record.error) == (7, 5, "RuntimeError: bug")
    assert read_failure(tmp_path, 0) is None


def test_world_size_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, accumulate_grad_batches=1)
    trainer._progress.batches_in_epoch = 3
    adapt_to_world_size(trainer, "keep_per_rank_batch", {"xtrain": {"world_size": 2}})
    assert trainer.accumulate_grad_batches == 1 and trainer._progress.batches_in_epoch == 6
    assert "keeping the per-rank batch" in capsys.readouterr().out
    trainer._progress.batches_in_epoch = 4
    adapt_to_world_size(trainer, "keep_global_batch", {"xtrain": {"world_size": 2}, "global_batches": 2})
    assert trainer.accumulate_grad_batches == 2 and trainer._progress.batches_in_epoch == 8
    # A later restart at the same size keeps the run's global batch (from the checkpoint), not the argument's.
    trainer.accumulate_grad_batches = 1
    adapt_to_world_size(trainer, "keep_global_batch", {"xtrain": {"world_size": 1}, "global_batches": 2})
    assert trainer.accumulate_grad_batches == 2


def test_the_position_follows_data_parallel_ranks_not_processes(capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint of 4 processes as 2 tensor-parallel x 2 data-parallel ranks read 4 batches on each of 2
    data-parallel ranks: one process continues at batch 8 (it continued at 16, skipping half an epoch), and a
    run of 4 processes with tensor_parallel=4 (one data-parallel rank) into 4 data-parallel ranks at batch 1 (it
    continued at 4, silently)."""
    trainer = Trainer(accelerator="cpu", devices=1, logger=False)
    trainer._progress.batches_in_epoch = 4
    adapt_to_world_size(trainer, "keep_per_rank_batch", {"xtrain": {"world_size": 4, "data_parallel_size": 2}})
    assert trainer._progress.batches_in_epoch == 8
    assert "checkpoint of 2 data-parallel rank(s) with 1" in capsys.readouterr().out
    trainer._progress.batches_in_epoch = 4
    adapt_to_world_size(trainer, "keep_per_rank_batch", {"xtrain": {"world_size": 4, "data_parallel_size": 1}})
    assert trainer._progress.batches_in_epoch == 4 and not capsys.readouterr().out  # same data-parallel size

    class FourRanks:
        accumulate_grad_batches = 1
        num_training_batches = math.inf
        _train_loader = None

        class strategy:
            distributed_sampler_kwargs: ClassVar[dict[str, int]] = {"num_replicas": 4, "rank": 0}

        class _progress:
            batches_in_epoch = 4

    adapt_to_world_size(FourRanks(), "keep_per_rank_batch",  # type: ignore[arg-type]
                        {"xtrain": {"world_size": 4, "data_parallel_size": 1}})
    assert FourRanks._progress.batches_in_epoch == 1


class _Resumed:
    """A stand-in for a Trainer resuming with ``ranks`` data-parallel ranks and loader batches of ``batch``
    samples (what the policy reads); the 4-process runs it stands for are in the model-parallel grid."""

    def __init__(self, ranks: int, batch: int, batches: int, at: int) -> None:
        self.accumulate_grad_batches = 1
        self.num_training_batches = batches
        self.strategy = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": ranks, "rank": 0})
        self._progress = SimpleNamespace(batches_in_epoch=at)
        self._train_loader = SimpleNamespace(batch_sampler=SimpleNamespace(batch_size=batch))


@pytest.mark.parametrize(("at", "expected", "told"), [
    (8, 8, "the epoch it was saved in had ended (128 samples): the next one starts"),
    (4, 4, "the interrupted epoch continues exactly at batch 4"),
    (3, 3, "the interrupted epoch continues exactly at batch 3"),
])
def test_the_position_counts_samples_when_the_per_rank_batch_changed(at: int, expected: int, told: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """2 data-parallel ranks x 8 samples resumed as 4 x 4 (the global batch kept, as the strategies README asks):
    the position was rescaled by the ranks alone, so a checkpoint at the end of epoch 0 retrained half of it (found
    by an outside trial resuming a 2x2 model-parallel checkpoint as 1x4)."""
    trainer = _Resumed(ranks=4, batch=4, batches=8, at=at)
    adapt_to_world_size(trainer, "keep_per_rank_batch",  # type: ignore[arg-type]
                        {"xtrain": {"world_size": 4, "data_parallel_size": 2}, "per_rank_batch_size": 8})
    out = capsys.readouterr().out
    assert trainer._progress.batches_in_epoch == expected, out
    assert told in out and "the per-rank batch is 4 samples (was 8), so the global batch is unchanged" in out, out


def test_a_checkpoint_without_the_batch_size_keeps_the_old_reading(capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _Resumed(ranks=4, batch=4, batches=8, at=4)
    adapt_to_world_size(trainer, "keep_per_rank_batch",  # type: ignore[arg-type]
                        {"xtrain": {"world_size": 2, "data_parallel_size": 2}})
    assert trainer._progress.batches_in_epoch == 2 and "keeping the per-rank batch" in capsys.readouterr().out


def test_a_checkpoint_records_its_data_parallel_size(tmp_path: Path) -> None:
    trainer = fit(tmp_path, max_steps=1, run_name="dp")
    trainer.save_checkpoint(tmp_path / "one.ckpt")
    saved = torch.load(tmp_path / "one.ckpt", weights_only=True)
    assert saved["xtrain"]["data_parallel_size"] == 1 and saved["global_batches"] == 1
    assert saved["per_rank_batch_size"] == trainer.train_dataloader.batch_size  # type: ignore[union-attr]


def test_a_global_batch_that_cannot_split_over_the_new_ranks_is_refused() -> None:
    class TwoRanks:  # a stand-in for a 2-rank Trainer: only what the policy reads
        world_size = 2
        accumulate_grad_batches = 1
        _train_loader = None

        class strategy:
            distributed_sampler_kwargs: ClassVar[dict[str, int]] = {"num_replicas": 2, "rank": 0}

    with pytest.raises(ConfigError, match="cannot keep the global batch of 3"):
        adapt_to_world_size(TwoRanks(), "keep_global_batch",  # type: ignore[arg-type]
                            {"xtrain": {"world_size": 3}, "global_batches": 3})


def test_a_version_you_fixed_is_kept(tmp_path: Path) -> None:
    from xtrain.core.loggers import CSVLogger

    trainer = fit(tmp_path, max_steps=1, run_name="exp", logger=CSVLogger(tmp_path, version=3))
    assert trainer.log_dir == str(tmp_path / "xtrain_logs" / "version_3")
