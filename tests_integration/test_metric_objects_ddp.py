"""torchmetrics objects logged under ddp on 2 processes equal torchmetrics over the whole data set in one process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from xtrain.core.testing import python_command, run_processes

torchmetrics = pytest.importorskip("torchmetrics")
pytest.importorskip("xtrain.strategies")
pytest.importorskip("wandb")

SCRIPTS = Path(__file__).parent / "scripts"


def test_epoch_metric_under_ddp_equals_one_process_on_all_data(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    env = {"WANDB_SILENT": "true", "WANDB_DATA_DIR": str(tmp_path / "wd"), "WANDB_CACHE_DIR": str(tmp_path / "wc"),
           "WANDB_CONFIG_DIR": str(tmp_path / "wcfg")}
    result = run_processes([python_command(str(SCRIPTS / "metrics_ddp.py"), str(out))], timeout=240, envs=[env],
                           cwd=tmp_path)
    assert result.returncodes == [0], result.output
    found = json.loads(out.read_text())
    sys.path.insert(0, str(SCRIPTS))
    try:
        from metrics_ddp import BATCH, Scored, data
    finally:
        sys.path.remove(str(SCRIPTS))
    module = Scored()
    f1 = torchmetrics.classification.MulticlassF1Score(num_classes=4, average="macro")
    acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4, average="micro")
    recall = torchmetrics.classification.MulticlassRecall(num_classes=4, average="macro")
    batch_f1 = []
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(data(), batch_size=BATCH):
            preds = module.net(x).argmax(-1)
            for metric in (f1, acc, recall):
                metric.update(preds, y)
            batch_f1.append(float(torchmetrics.functional.classification.multiclass_f1_score(
                preds, y, num_classes=4, average="macro")))
    expected = {"val_f1": float(f1.compute()), "val_acc": float(acc.compute()), "val_recall": float(recall.compute())}
    for mode in ("auto", "uneven"):
        for key, value in expected.items():
            assert found[mode][key] == pytest.approx(value, abs=1e-6), (mode, key)
    # F1 is not a mean of per-batch values: averaging batch F1s (what a logged tensor does) gives another number.
    assert abs(sum(batch_f1) / len(batch_f1) - expected["val_f1"]) > 1e-3
    even, odd = found["repeat_warnings"]  # rank 0's: a validate whose data does not divide by the ranks says so
    assert even == [] and len(odd) == 1, found["repeat_warnings"]
    assert "validation dataloader 0 has 95 samples" in odd[0] and "repeats 1 sample " in odd[0]
    assert "Trainer(devices=1)" in odd[0] and "use_distributed_sampler=False" in odd[0]
    assert found["update_counts_after"] == [0, 0, 0]  # reset after each epoch (else "uneven" would count twice)
    # The tracker is rank 0's alone: one W&B run for both validate() calls (a stage leaves the run open, as
    # Lightning's), none from rank 1.
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and all(found["run_id"] in r.name for r in runs), runs
    for rank in (0, 1):  # the profiler's report of each rank, in its own file
        report = (tmp_path / "perf" / f"report-validate-rank{rank}.txt").read_text()
        assert f"(validate, rank {rank})" in report and "validation_step" in report
