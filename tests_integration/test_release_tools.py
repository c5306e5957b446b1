"""tools/release.py and tools/check_api.py, run for real on a scratch copy of the repository with a release tag."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("griffe")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(repo_root: Path, tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".venv", "build", "dist")
    for name in ("packages", "tools"):
        shutil.copytree(repo_root / name, target / name, ignore=ignore)
    git(target, "init", "-q")
    git(target, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(target, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "release")
    git(target, "tag", "xtrain-core-v1.0.0")
    return target


def run_tool(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(repo / "tools" / args[0]), *args[1:]], capture_output=True, text=True,
                          cwd=repo, timeout=300)


def test_a_breaking_change_fails_the_api_check_until_the_major_moves(repo: Path) -> None:
    assert run_tool(repo, "check_api.py", "--repo", str(repo), "xtrain-core").returncode == 0
    trainer = repo / "packages" / "xtrain-core" / "src" / "xtrain" / "core" / "trainer.py"
    text = trainer.read_text()
    assert "datamodule: DataModule | None = None, ckpt_path: str | Path | None = None) -> None:" in text
    trainer.write_text(text.replace("datamodule: DataModule | None = None, ckpt_path: str | Path | None = None) -> None:",
                                    "datamodule: DataModule | None = None, checkpoint: str | Path | None = None) -> None:"))
    broken = run_tool(repo, "check_api.py", "--repo", str(repo), "xtrain-core")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "ckpt_path" in broken.stderr and "python tools/release.py xtrain-core major" in broken.stderr
    bumped = run_tool(repo, "release.py", "xtrain-core", "major")
    assert "xtrain-core: 2.0.0" in bumped.stdout
    # The plugins and the meta-package pin xtrain-core<2: the release tool says so.
    assert bumped.returncode == 1 and "xtrain requires xtrain-core>=1.0,<2 but xtrain-core is 2.0.0" in bumped.stderr
    assert run_tool(repo, "check_api.py", "--repo", str(repo), "xtrain-core").returncode == 0


def test_release_rolls_the_changelog_and_prints_the_tag(repo: Path) -> None:
    result = run_tool(repo, "release.py", "xtrain-core", "minor")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "tag: xtrain-core-v1.1.0"
    about = (repo / "packages" / "xtrain-core" / "src" / "xtrain" / "core" / "__about__.py").read_text()
    assert '__version__ = "1.1.0"' in about
    changelog = (repo / "packages" / "xtrain-core" / "CHANGELOG.md").read_text()
    assert changelog.index("## [Unreleased]") < changelog.index("## [1.1.0] - ") < changelog.index("## [1.0.0]")
