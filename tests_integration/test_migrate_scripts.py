"""Lightning-style scripts, rewritten by ``xtrain migrate`` and trained for a few steps: the same global_step,
checkpoint names and logged keys as Lightning 2.x documents for them (the expected values were also checked by
running the original scripts under Lightning 2.6.6, one process and ddp on two).

One process by default; the two-process ``ddp`` runs are marked ``lightning_scripts`` and run by
``nox -s lightning_scripts`` (``XTRAIN_LIGHTNING_SCRIPTS=1``). A script whose Lightning feature the installed xtrain
lacks (the API-parity work of issue 18) is an expected failure that names the feature, not a run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libcst")

from xtrain.core._internal.migrate import installed
from xtrain.core.migrate import main as migrate
from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import python_command, run_processes

SCRIPTS = Path(__file__).parent / "lightning_scripts"
DDP = pytest.mark.lightning_scripts
DEVICES = [1, pytest.param(2, marks=DDP, id="ddp2")]

# What each script needs beyond what xtrain had before the parity work; checked on the installed xtrain.
NEEDS: dict[str, dict[str, bool | None]] = {
    "gan": {"TrainModule.toggle_optimizer": None, "training_step(self, batch) without batch_idx": None,
            "global_step counts both optimizers' steps": None},
    "driver": {"EarlyStopping(verbose=)": None, "TrainModule.load_from_checkpoint": None,
               "trainer.test(verbose=)": None},
    "autoencoder": {"xtrain.core.cli.XtrainCLI": None},
    "classifier": {"an `epoch` column in the logs": None},
}


def _has(feature: str) -> bool | None:
    checks = {
        "TrainModule.toggle_optimizer": lambda: installed.exists("xtrain.core.TrainModule.toggle_optimizer"),
        "EarlyStopping(verbose=)": lambda: installed.accepts("xtrain.core.EarlyStopping", "verbose"),
        "TrainModule.load_from_checkpoint": lambda: installed.exists("xtrain.core.TrainModule.load_from_checkpoint"),
        "trainer.test(verbose=)": lambda: installed.accepts("xtrain.core.Trainer.test", "verbose"),
        "xtrain.core.cli.XtrainCLI": lambda: installed.exists("xtrain.core.cli.XtrainCLI"),
    }
    check = checks.get(feature)
    return check() if check else None  # None: only the run itself can tell


def _expect_missing(name: str) -> list[str]:
    return [feature for feature in NEEDS.get(name, {}) if _has(feature) is False]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lightning_scripts")
    for script in SCRIPTS.glob("*.py"):
        shutil.copy(script, folder)
    assert migrate(["--quiet", str(folder)]) == 0
    return folder


def train(migrated: Path, name: str, devices: int, *args: str) -> dict[str, Any]:
    if devices > 1 and not os.environ.get("XTRAIN_LIGHTNING_SCRIPTS"):
        pytest.skip("two-process runs: nox -s lightning_scripts (XTRAIN_LIGHTNING_SCRIPTS=1)")
    if devices > 1 and "ddp" not in STRATEGIES:
        pytest.skip("needs xtrain-strategies")
    missing = _expect_missing(name)
    if missing:
        pytest.xfail(f"needs what the installed xtrain lacks: {', '.join(missing)}")
    work = migrated / f"{name}-{devices}"
    work.mkdir()
    out = work / "summary.json"
    result = run_processes([python_command(str(migrated / f"{name}.py"), *args)], timeout=300, cwd=work,
                           envs=[{"SCRIPT_OUT": str(out), "SCRIPT_DEVICES": str(devices)}])
    if result.returncodes != [0] and NEEDS.get(name):
        pytest.xfail(f"failed; may need {', '.join(NEEDS[name])}:\n{result.output[-3000:]}")
    assert result.returncodes == [0], result.output
    summary: dict[str, Any] = json.loads(out.read_text())
    return summary


def checkpoint_names(summary: dict[str, Any]) -> set[str]:
    return {Path(p).name for p in summary["checkpoints"]}


def test_migrated_scripts_keep_lightning_only_where_a_comment_says_why(migrated: Path) -> None:
    for script in migrated.glob("*.py"):
        lines = script.read_text().splitlines()
        for i, line in enumerate(lines):
            if re.match(r"\s*(from|import) (lightning|pytorch_lightning)\b", line):
                assert lines[i - 1].lstrip().startswith("# xtrain migrate:"), f"{script.name}:{i + 1}: {line}"


@pytest.mark.parametrize("devices", DEVICES)
def test_boring_model(migrated: Path, devices: int) -> None:
    s = train(migrated, "boring", devices)
    # 8 batches a rank (limit_train_batches) x 2 epochs; Lightning's default checkpoint name, in xtrain's log folder.
    assert s["global_step"] == 16
    assert any(p.endswith("xtrain_logs/version_0/checkpoints/epoch=1-step=16.ckpt") for p in s["checkpoints"])
    assert s["fit_callback_metrics"] == ["train_loss", "valid_loss"]
    assert "test_loss" in s["logged_metrics"]


@pytest.mark.parametrize("devices", DEVICES)
def test_gan_with_two_optimizers(migrated: Path, devices: int) -> None:
    s = train(migrated, "gan", devices)
    # 6 batches x 2 epochs; under manual optimization Lightning counts each optimizer's step: 2 per batch.
    assert s["global_step"] == 24
    assert "epoch=1-step=24.ckpt" in checkpoint_names(s)
    assert {"d_loss", "g_loss"} <= set(s["callback_metrics"])


@pytest.mark.parametrize("devices", DEVICES)
def test_classifier_with_sync_dist_and_a_scheduler_dict(migrated: Path, devices: int) -> None:
    s = train(migrated, "classifier", devices)
    steps = 16 // devices  # 64 samples, batches of 8, shared by the ranks, 2 epochs
    assert s["global_step"] == steps
    assert f"epoch=1-step={steps}.ckpt" in checkpoint_names(s)
    assert s["lr"] == pytest.approx(0.1 * 0.5 ** (steps // 3))  # StepLR(step_size=3) stepped every step
    assert {"train_loss", "train_loss_step", "train_loss_epoch", "val_loss", "val_acc"} <= set(s["callback_metrics"])
    assert {"lr-SGD", "step", "train_loss_step", "train_loss_epoch", "val_loss", "val_acc"} <= set(s["csv_columns"])
    gaps = [what for what, ok in (("an `epoch` column in the logs", "epoch" in s["csv_columns"]),
                                  ("lr-SGD in trainer.callback_metrics", "lr-SGD" in s["callback_metrics"])) if not ok]
    if gaps:
        pytest.xfail(f"Lightning also has {' and '.join(gaps)}")


@pytest.mark.parametrize("devices", DEVICES)
def test_driver_with_checkpoints_early_stopping_tensorboard_and_reload(migrated: Path, devices: int) -> None:
    s = train(migrated, "driver", devices)
    names = checkpoint_names(s) - {"last.ckpt"}
    assert len(names) == 2 and all(re.fullmatch(r"epoch=\d-val_loss=\d+\.\d\d\.ckpt", n) for n in names), names
    assert s["best"] in names
    assert any("runs/version_0/checkpoints/" in p for p in s["checkpoints"])
    assert s["reloaded_hidden"] == 16 and s["reloaded_lr"] == 0.01
    assert s["test_keys"] == ["test_loss"]


@pytest.mark.parametrize("devices", DEVICES)
def test_autoencoder_with_datamodule_and_cli(migrated: Path, devices: int) -> None:
    args = ["--trainer.max_epochs=2", "--trainer.limit_train_batches=4", "--trainer.enable_progress_bar=false",
            "--trainer.accelerator=cpu", f"--trainer.devices={devices}", "--data.batch_size=4",
            "--model.hidden_dim=6"]
    if devices > 1:
        args.append("--trainer.strategy=ddp")
    s = train(migrated, "autoencoder", devices, *args)
    assert s["global_step"] == 8
    assert "epoch=1-step=8.ckpt" in checkpoint_names(s)
    assert s["hidden_dim"] == 6 and s["batch_size"] == 4
    assert {"train_loss", "val_loss"} <= set(s["callback_metrics"])
