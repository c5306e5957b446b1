"""``deterministic=True`` asks XLA to round as written, through ``XLA_FLAGS``, before its runtime starts.

These tests need no torch_xla: they check what is written to the environment. The effect on XLA itself is
``test_xla_training.py::test_deterministic_bf16_resume_is_bitwise_on_xla`` (``nox -s xla``).
"""

from __future__ import annotations

import sys

import pytest

from xtrain.accelerators._internal.xla_runtime import FAITHFUL_ROUNDING, request_faithful_rounding


@pytest.fixture(autouse=True)
def _runtime_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``nox -s xla`` earlier tests started XLA's runtime in this process; these are about a fresh one."""
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)


def test_the_flag_is_added_to_the_users_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    assert request_faithful_rounding()
    assert FAITHFUL_ROUNDING == "--xla_allow_excess_precision=false"
    import os

    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/tmp/x {FAITHFUL_ROUNDING}"


def test_a_users_own_choice_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_allow_excess_precision=true")
    assert request_faithful_rounding()
    import os

    assert os.environ["XLA_FLAGS"] == "--xla_allow_excess_precision=true"


def test_unset_flags_get_only_the_rounding_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert request_faithful_rounding()
    import os

    assert os.environ["XLA_FLAGS"] == FAITHFUL_ROUNDING
