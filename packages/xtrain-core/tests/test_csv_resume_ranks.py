"""Under ddp every rank resumes the loggers, and only global rank 0 may rewrite ``metrics.csv``: two ranks renaming
one temporary file over it failed at random (``FileNotFoundError: metrics.csv.tmp``, outside trial X)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from xtrain.core.loggers import CSVLogger
from xtrain.core.rank_zero import rank_zero_only


@pytest.fixture
def rank_one() -> Iterator[None]:
    before = rank_zero_only.rank
    rank_zero_only.rank = 1
    try:
        yield
    finally:
        rank_zero_only.rank = before


def _logger_with_rows(root: Path) -> tuple[CSVLogger, dict[str, object]]:
    logger = CSVLogger(root, name="run", version=0)
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.save()
    state = logger.state_dict()
    logger.log_metrics({"loss": 2.0}, step=1)  # after the checkpoint: dropped by a resume
    logger.save()
    return logger, state


def test_other_ranks_take_the_version_and_leave_the_file(tmp_path: Path, rank_one: None) -> None:
    logger, state = _logger_with_rows(tmp_path)
    before = logger.metrics_file.read_text()
    other = CSVLogger(tmp_path, name="run")
    other.resume(state, step=0)
    assert other.version == 0 and other.metrics_file.read_text() == before
    assert not list(logger.metrics_file.parent.glob("*.tmp"))


def test_rank_zero_keeps_the_rows_written_before_the_checkpoint(tmp_path: Path) -> None:
    logger, state = _logger_with_rows(tmp_path)
    CSVLogger(tmp_path, name="run").resume(state, step=0)
    assert logger.metrics_file.read_text().splitlines() == ["loss,step", "1.0,0"]
