"""The README's main job: the digits classifier reaches 95% validation accuracy through the xtrain command."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from xtrain.core.registry import STRATEGIES
from xtrain.core.testing import run_processes

pytest.importorskip("sklearn")
pytest.importorskip("jsonargparse")


def xtrain_command() -> list[str]:
    exe = shutil.which("xtrain", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-c", "from xtrain.core.cli import main; raise SystemExit(main())"]


@pytest.mark.parametrize("extra", [[], ["--trainer.devices", "2", "--trainer.strategy", "ddp"]],
                         ids=["one-process", "ddp-two-processes"])
def test_digits_reaches_95_percent(repo_root: Path, tmp_path: Path, extra: list[str]) -> None:
    if extra and "ddp" not in STRATEGIES:
        pytest.skip("the ddp variant needs xtrain-strategies")
    config = repo_root / "docs" / "examples" / "digits" / "config.yaml"
    result = run_processes([[*xtrain_command(), "fit", "--config", str(config), "--trainer.default_root_dir",
                             str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false", *extra]],
                           timeout=300, cwd=tmp_path)
    assert result.returncodes == [0], result.output
    accuracy = float(re.search(r"val_acc=([0-9.]+)", result.output.split("fit finished")[1]).group(1))  # type: ignore[union-attr]
    assert accuracy >= 0.95, result.output
    version = tmp_path / "runs" / "xtrain_logs" / "version_0"
    assert list(version.glob("events.out.tfevents.*")) and (version / "config.yaml").is_file()
    assert (version / "checkpoints" / "last.ckpt").is_file()
