"""Run names that would share a run, two jobs fitting one run at once, and what restarts and preemption advise
(an outside trial of long jobs found each of these)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from xtrain.core import ConfigError, Trainer, seed_everything
from xtrain.core.restarts import RUN_ID_ENV
from xtrain.core.testing import TinyClassifier, tiny_loaders


@pytest.fixture(autouse=True)
def no_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (RUN_ID_ENV, "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "XTRAIN_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)


def _trainer(root: Path, **kwargs: Any) -> Trainer:
    kwargs.setdefault("max_steps", 2)
    return Trainer(default_root_dir=root, enable_progress_bar=False, enable_model_summary=False, logger=False,
                   num_sanity_val_steps=0, **kwargs)


@pytest.mark.parametrize("name", ["exp/1", "exp 1", "exp:1", "a\nb", ".", "../escape", "run."])
def test_a_run_name_that_is_not_a_directory_name_as_given_is_refused(name: str, tmp_path: Path) -> None:
    """They were rewritten to ``exp_1`` etc.: four names were one run, and 'auto' resumed another's weights."""
    with pytest.raises(ConfigError, match=r"run_name=.*names the run's directory.*Fix: use letters, digits"):
        _trainer(tmp_path, run_name=name)


def test_a_run_name_too_long_for_a_directory_is_refused_before_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"run_name=.*300 bytes, too long"):
        _trainer(tmp_path, run_name="x" * 300)
    assert _trainer(tmp_path, run_name="resnet-lr3e-4_v1.2").max_steps == 2


def test_a_second_job_fitting_the_same_run_at_once_is_refused(tmp_path: Path) -> None:
    """The second job resumed the first job's checkpoint while the first was still writing them."""
    script = textwrap.dedent(f"""
        import sys, time
        from xtrain.core import Callback, Trainer
        from xtrain.core.testing import TinyClassifier, tiny_loaders

        class Slow(Callback):
            def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
                if trainer.global_step == 1:
                    print("training", flush=True)
                    time.sleep(30)

        trainer = Trainer(default_root_dir={str(tmp_path)!r}, run_name="dup", max_steps=2, logger=False,
                          enable_progress_bar=False, enable_model_summary=False, callbacks=[Slow()])
        trainer.fit(TinyClassifier(), tiny_loaders(n=64)[0], ckpt_path="auto")
    """)
    first = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        while first.stdout.readline().strip() != "training":  # after the 'auto' log line
            assert first.poll() is None, "the first job ended early"
        with pytest.raises(ConfigError, match=r"run_name='dup': is being fitted by another job right now \(pid "
                                              rf"{first.pid} on .*Fix: give this job another run_name"):
            _trainer(tmp_path, run_name="dup").fit(TinyClassifier(), tiny_loaders(n=64)[0], ckpt_path="auto")
    finally:
        first.kill()
        first.wait(timeout=60)
    deadline = time.monotonic() + 10
    seed_everything(0)
    while True:  # the killed job's lock is gone with its process: the run resumes at once
        try:
            trainer = _trainer(tmp_path, run_name="dup")
            trainer.fit(TinyClassifier(), tiny_loaders(n=64)[0], ckpt_path="auto")
            break
        except ConfigError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert trainer.global_step == 2
    trainer = _trainer(tmp_path, run_name="dup", max_steps=3)  # and a later fit in this process takes it again
    trainer.fit(TinyClassifier(), tiny_loaders(n=64)[0], ckpt_path="auto")
    assert trainer.global_step == 3


def test_max_restarts_without_auto_warns_that_each_restart_starts_over(tmp_path: Path) -> None:
    """Every restart trained from step 0 into a new log directory, without a word."""
    from xtrain.core._internal.auto_resume import Healing, check_auto

    trainer = _trainer(tmp_path, max_restarts=2, strategy="ddp", devices=1, accelerator="cpu")
    with pytest.warns(UserWarning, match=r"max_restarts=2: .*ckpt_path=None, so each restart trains from step 0.*"
                                         r"ckpt_path='auto'"):
        check_auto(trainer, Healing(max_restarts=2), "fit", None, trainer.strategy.launcher)
    with pytest.warns(UserWarning, match=r"from '.*missing.ckpt' again"), \
            pytest.raises(ConfigError, match="does not exist"):
        trainer.fit(TinyClassifier(), tiny_loaders(n=64)[0], ckpt_path=str(tmp_path / "missing.ckpt"))


def test_a_mistyped_ckpt_path_lists_auto_among_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ckpt_path='Auto': does not exist. Valid choices: .*'auto'"):
        _trainer(tmp_path).fit(TinyClassifier(), tiny_loaders(n=64)[0], ckpt_path="Auto")
