"""The examples of the callbacks, tuning, export, metrics and profiling guides run as written."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

GUIDES = Path(__file__).resolve().parents[3] / "docs" / "guides"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


@pytest.mark.parametrize("page", ["callbacks.md", "tuning.md", "export.md", "metrics.md", "profiling.md"])
def test_guide_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if page == "export.md":
        pytest.importorskip("onnxruntime")
    if page == "tuning.md":
        pytest.importorskip("matplotlib")
    if page == "metrics.md":
        pytest.importorskip("torchmetrics")
    if not (GUIDES / page).exists():
        pytest.skip("the docs are not beside these tests (an unpacked sdist)")
    monkeypatch.chdir(tmp_path)
    blocks = BLOCK.findall((GUIDES / page).read_text())
    assert blocks, f"{page} has no python examples"
    for number, code in enumerate(blocks):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            exec(compile(code, f"{page}[{number}]", "exec"), {"__name__": "__main__"})
