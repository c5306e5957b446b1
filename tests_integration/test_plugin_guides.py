"""The plugin guides' packages (docs/examples/plugins/, included verbatim by docs/guides/custom-*.md) are pip-installed
for real and pass the conformance kit, so a guide cannot drift from the API."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from xtrain.core.testing import python_command, run_processes

pytest.importorskip("hatchling")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples" / "plugins"
PACKAGES = sorted(p.parent for p in EXAMPLES.glob("*/pyproject.toml"))
GUIDES = ["custom-accelerator.md", "custom-strategy.md", "custom-precision.md", "custom-checkpoint-io.md",
          "custom-environment.md"]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    target = tmp_path / "guides-site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), *map(str, PACKAGES)], check=True, timeout=300)
    return target


def test_every_guide_includes_its_package_and_every_package_has_a_guide() -> None:
    included: set[str] = set()
    for guide in GUIDES:
        text = (ROOT / "docs" / "guides" / guide).read_text()
        snippets = re.findall(r'--8<-- "([^"]+)"', text)
        assert snippets, f"{guide} includes no file of docs/examples/plugins/"
        for snippet in snippets:
            assert (ROOT / snippet).is_file(), f"{guide} includes {snippet}, which does not exist"
            included.add(Path(snippet).relative_to("docs/examples/plugins").parts[0])
    assert included == {p.name for p in PACKAGES}


def test_every_guide_package_passes_the_kit(site: Path, tmp_path: Path) -> None:
    """One pytest process for the five packages (each test file names its package, so a failure says whose)."""
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    result = run_processes([python_command("-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs",
                                           *[str(p / "tests") for p in PACKAGES])], envs=[env], timeout=540,
                           cwd=tmp_path)
    assert result.returncodes == [0], result.output
    passed = re.search(r"(\d+) passed", result.output)
    assert passed and int(passed.group(1)) >= 8 * len(PACKAGES), result.output
    assert "failed" not in result.output and "skipped" not in result.output, result.output
