"""``xtrain migrate``: each rewrite, formatting kept, idempotence, the modes' exit codes, YAML, and the docs table."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from xtrain.core._internal.migrate import installed
from xtrain.core._internal.migrate.config import migrate_yaml
from xtrain.core._internal.migrate.docs import BEGIN, END, render
from xtrain.core._internal.migrate.rules import RULES, Action, Section
from xtrain.core._internal.migrate.source import migrate_python
from xtrain.core.migrate import main, migrate_source

ROOT = Path(__file__).resolve().parents[3]


def migrate(code: str) -> str:
    return migrate_source(textwrap.dedent(code))


def notes(code: str) -> list[str]:
    return [message for _, message in migrate_python(textwrap.dedent(code)).attention]


def test_from_imports_and_class_names_are_renamed_and_formatting_survives() -> None:
    out = migrate("""\
        import os  # a comment that stays
        from lightning.pytorch import LightningModule, Trainer
        from lightning.pytorch.callbacks import (
            ModelCheckpoint,  # the best one
            EarlyStopping,
        )


        class Model(LightningModule):   # odd spacing kept
            def training_step(self, batch, batch_idx):
                return batch.sum()    # so is this
        """)
    assert out == textwrap.dedent("""\
        import os  # a comment that stays
        from xtrain.core import TrainModule, Trainer
        from xtrain.core.callbacks import (
            ModelCheckpoint,  # the best one
            EarlyStopping,
        )


        class Model(TrainModule):   # odd spacing kept
            def training_step(self, batch, batch_idx):
                return batch.sum()    # so is this
        """)


def test_code_without_lightning_is_returned_byte_for_byte() -> None:
    code = "import torch\n\n\nx = torch.zeros(3)  # nothing to do\n"
    assert migrate_source(code) == code


@pytest.mark.parametrize("spelling", ["import pytorch_lightning as pl", "import lightning.pytorch as pl",
                                      "import lightning as pl"])
def test_module_aliases_become_named_imports(spelling: str) -> None:
    prefix = "pl.pytorch." if spelling == "import lightning as pl" else "pl."
    out = migrate(f"""\
        {spelling}


        class Data(pl.LightningDataModule):
            pass


        cb = {prefix}callbacks.LearningRateMonitor()
        trainer = pl.Trainer(max_epochs=1)
        """)
    assert "pl" not in out.replace("pl.", "").split("class")[0].replace("import", "") or "import" not in out
    assert "from xtrain.core import DataModule, Trainer" in out
    assert "from xtrain.core.callbacks import LearningRateMonitor" in out
    assert "class Data(DataModule):" in out and "cb = LearningRateMonitor()" in out
    assert "trainer = Trainer(max_epochs=1)" in out and "lightning" not in out


def test_submodule_paths_aliases_and_module_imports() -> None:
    out = migrate("""\
        from pytorch_lightning.core.module import LightningModule as LM
        from lightning.pytorch.callbacks.progress import TQDMProgressBar
        from lightning.pytorch import loggers as pl_loggers


        class M(LM):
            pass


        bar = TQDMProgressBar(refresh_rate=10)
        logger = pl_loggers.TensorBoardLogger("logs")
        """)
    assert "from xtrain.core import TrainModule as LM" in out and "class M(LM):" in out
    assert "from xtrain.core.callbacks import ProgressBar" in out and "bar = ProgressBar()" in out
    assert "from xtrain.core import loggers as pl_loggers" in out
    assert 'logger = pl_loggers.TensorBoardLogger("logs")' in out


def test_names_without_equivalent_stay_with_a_comment_and_a_second_run_changes_nothing() -> None:
    code = textwrap.dedent("""\
        from lightning.pytorch.callbacks import ModelCheckpoint, ModelPruning

        callbacks = [ModelCheckpoint(), ModelPruning("l1_unstructured")]
        """)
    first = migrate_python(code)
    assert "from xtrain.core.callbacks import ModelCheckpoint\n" in first.new
    assert ("# xtrain migrate: ModelPruning: not in xtrain yet (the Trainer takes xtrain callbacks only); write a "
            "Callback whose on_train_epoch_end calls torch.nn.utils.prune (e.g. prune.l1_unstructured(module.fc, "
            "'weight', amount=0.2))\nfrom lightning.pytorch.callbacks import ModelPruning\n") in first.new
    assert [line for line, _ in first.attention] == [1, 3]
    second = migrate_python(first.new)
    assert not second.changed
    assert second.attention  # still listed as needing attention


def test_translated_idioms() -> None:
    out = migrate("""\
        from lightning.pytorch import Trainer, cli_lightning_logo
        from lightning.pytorch.utilities.imports import _TORCHVISION_AVAILABLE
        from lightning.pytorch.utilities.types import STEP_OUTPUT
        from lightning.pytorch.utilities.model_helpers import get_torchvision_model


        def step(self) -> STEP_OUTPUT:
            return self.trainer.lightning_module


        if __name__ == "__main__":
            cli_lightning_logo()
            Trainer(default_root_dir="runs/lightning_logs")
        """)
    assert 'importlib.util.find_spec("torchvision") is not None' in out
    assert "from typing import Any" in out and "def step(self) -> Any:" in out
    assert "from torchvision.models import get_model" in out
    assert "return self.trainer.module" in out
    assert "cli_lightning_logo" not in out and 'default_root_dir="runs/xtrain_logs"' in out


def test_a_dropped_call_that_was_alone_in_its_block_leaves_pass() -> None:
    out = migrate("""\
        from lightning.pytorch import cli_lightning_logo

        if True:
            cli_lightning_logo()
        """)
    assert out == "\nif True:\n    pass\n"


def test_trainer_arguments() -> None:
    out = migrate("""\
        import pytorch_lightning as pl

        a = pl.Trainer(gpus=2, precision=16, replace_sampler_ddp=False, auto_select_gpus=True)
        b = pl.Trainer(tpu_cores=8, precision="bf16", weights_summary=None)
        c = pl.Trainer(gpus=0, progress_bar_refresh_rate=0)
        d = pl.Trainer(accelerator="ddp", gpus=2)
        e = pl.Trainer(accelerator="cpu")
        """)
    assert 'd = Trainer(strategy="ddp", devices=2, accelerator="gpu")' in out
    assert 'e = Trainer(accelerator="cpu")' in out
    assert ('a = Trainer(devices=2, precision="16-mixed", use_distributed_sampler=False, accelerator="gpu")'
            in out)
    assert 'b = Trainer(devices=8, precision="bf16-mixed", accelerator="tpu", enable_model_summary=False)' in out
    assert 'c = Trainer(accelerator="cpu", enable_progress_bar=False)' in out


def test_trainer_arguments_with_no_equivalent_are_flagged() -> None:
    found = notes("""\
        from lightning.pytorch import Trainer

        Trainer(resume_from_checkpoint="last.ckpt", not_an_argument=1)
        """)
    assert any(n.startswith('resume_from_checkpoint= is not a Trainer argument: remove it and pass '
                            'ckpt_path="last.ckpt" to trainer.fit(...)') for n in found)
    assert any("Trainer(not_an_argument=) is not accepted" in n for n in found)


def test_fabric_becomes_engine_and_missing_methods_are_flagged() -> None:
    result = migrate_python(textwrap.dedent("""\
        from lightning.fabric import Fabric, seed_everything

        fabric = Fabric(accelerator="cpu", devices=2, loggers=[])
        fabric.launch()
        seed_everything(1)
        fabric.log("loss", 1.0)
        """))
    assert "from xtrain.core import Engine, seed_everything" in result.new
    assert 'fabric = Engine(accelerator="cpu", devices=2, loggers=[])' in result.new
    messages = [m for _, m in result.attention]
    assert any(m.startswith("loggers=: the Engine has no loggers") for m in messages)
    assert any(m.startswith("fabric.log: the Engine has no loggers") for m in messages)
    assert not any("launch" in m for m in messages)


def test_lightning_1x_hooks_and_unsupported_log_arguments_are_flagged() -> None:
    found = notes("""\
        import lightning as L


        class M(L.LightningModule):
            def training_epoch_end(self, outputs):
                self.log("x", 1.0, not_an_option=True)
        """)
    assert any(n.startswith("training_epoch_end: removed in Lightning 2.0") for n in found)
    assert any("log(not_an_option=) is not accepted" in n for n in found)


def test_unparsable_file_is_an_error_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from lightning.pytorch import Trainer\ndef (:\n")
    assert main([str(bad)]) == 2
    assert "bad.py: could not parse" in capsys.readouterr().err


def test_modes_write_check_and_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    original = "from lightning.pytorch import Trainer\n\nTrainer(gpus=1)\n"
    script.write_text(original)
    (tmp_path / "plain.py").write_text("x = 1\n")
    assert main(["--check", str(tmp_path)]) == 1
    assert script.read_text() == original
    assert main(["--diff", str(script)]) == 0
    out = capsys.readouterr().out
    assert '-Trainer(gpus=1)\n+Trainer(devices=1, accelerator="gpu")' in out
    assert script.read_text() == original
    assert main([str(tmp_path)]) == 0
    summary = capsys.readouterr().out
    assert "2 file(s) read, 1 changed" in summary and "Trainer(gpus=N) -> accelerator=\"gpu\", devices=N" in summary
    assert script.read_text() == 'from xtrain.core import Trainer\n\nTrainer(devices=1, accelerator="gpu")\n'
    assert main(["--check", str(tmp_path)]) == 0


def test_xtrain_command_and_python_module(tmp_path: Path) -> None:
    from xtrain.core.cli import main as xtrain

    script = tmp_path / "m.py"
    script.write_text("import pytorch_lightning as pl\n\npl.seed_everything(1)\n")
    assert xtrain(["migrate", "--check", str(script)]) == 1
    done = subprocess.run([sys.executable, "-m", "xtrain.core.migrate", str(script)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert script.read_text() == "from xtrain.core import seed_everything\n\nseed_everything(1)\n"


CONFIG = """\
# a LightningCLI config
trainer:
  gpus: 2  # two cards
  precision: 16
  auto_select_gpus: true
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args:
        monitor: val_loss
    - class_path: pytorch_lightning.callbacks.ModelPruning
  logger:
    class_path: lightning.pytorch.loggers.TensorBoardLogger
    init_args:
      save_dir: logs
model:
  class_path: mypackage.Model
"""


def test_yaml_config_keys_and_class_paths() -> None:
    yaml = pytest.importorskip("yaml")
    result = migrate_yaml(CONFIG)
    assert "# a LightningCLI config\n" in result.new and "  devices: 2  # two cards\n" in result.new
    data = yaml.safe_load(result.new)
    trainer = data["trainer"]
    assert trainer["accelerator"] == "gpu" and trainer["devices"] == 2 and trainer["precision"] == "16-mixed"
    assert "auto_select_gpus" not in trainer and "gpus" not in trainer
    assert trainer["callbacks"][0]["class_path"] == "xtrain.core.callbacks.ModelCheckpoint"
    assert trainer["callbacks"][1]["class_path"] == "pytorch_lightning.callbacks.ModelPruning"
    assert trainer["logger"]["class_path"] == "xtrain.core.loggers.TensorBoardLogger"
    assert data["model"] == {"class_path": "mypackage.Model"}
    assert [line for line, _ in result.attention] == [10]
    assert not migrate_yaml(result.new).changed


def test_docs_table_is_generated_from_the_rules() -> None:
    page = (ROOT / "docs" / "migration.md").read_text()
    generated = page[page.index(BEGIN):page.index(END) + len(END)]
    assert generated + "\n" == render(), "run: python -m xtrain.core.migrate --write-docs docs/migration.md"
    for rule in RULES:
        assert rule.lightning.rpartition(".")[2] in generated, rule


def test_rule_table_is_consistent() -> None:
    keys = [(r.section, r.lightning) for r in RULES]
    assert len(keys) == len(set(keys)), "a Lightning name is listed twice"
    for r in RULES:
        assert r.action is not Action.RENAME or r.xtrain, r
        assert r.action is not Action.MISSING or r.note, f"{r.lightning}: say what to do instead"


# Targets that other work in progress adds; each is xfailed (not failed) until it is installed.
AWAITING = {"xtrain.core.cli.XtrainCLI", "xtrain.core.rank_zero", *(f"xtrain.core.rank_zero.rank_zero_{n}" for n in (
    "only", "info", "warn", "debug"))}


def _targets() -> list[str]:
    found = []
    for r in RULES:
        if (r.action is Action.RENAME and r.xtrain and r.section in (Section.NAME, Section.MODULE)
                and r.xtrain.startswith("xtrain.")):
            found.append(r.xtrain)
    return sorted(set(found))


@pytest.mark.parametrize("target", _targets())
def test_every_target_exists_in_the_installed_xtrain(target: str) -> None:
    if target in AWAITING and not installed.exists(target):
        pytest.xfail(f"{target} is not installed yet (awaited from the parity work or an optional package)")
    assert installed.exists(target), f"the rule table points at {target}, which does not exist"


def test_same_trainer_arguments_are_accepted_by_the_trainer() -> None:
    same = [r.lightning for r in RULES if r.section is Section.TRAINER_ARG and r.action is Action.SAME]
    missing = [a for a in same if not installed.accepts("xtrain.core.Trainer", a)]
    if missing:
        pytest.xfail(f"Trainer arguments awaited from the parity work: {missing}")


def test_only_directories_a_run_writes_move_to_xtrain_logs() -> None:
    """A checkpoint the script loads exists where Lightning wrote it: its path stays (the summary counted a rewrite
    of ``resume_from_checkpoint`` that the move to ``fit`` did not keep)."""
    code = textwrap.dedent("""\
        from lightning.pytorch import Trainer
        from lightning.pytorch.callbacks import ModelCheckpoint

        trainer = Trainer(callbacks=[ModelCheckpoint(dirpath="lightning_logs/ckpts")])
        trainer.fit(model, ckpt_path="lightning_logs/version_0/checkpoints/last.ckpt")
        best = Model.load_from_checkpoint("lightning_logs/version_0/checkpoints/best.ckpt")
        """)
    result = migrate_python(code)
    assert 'dirpath="xtrain_logs/ckpts"' in result.new
    assert 'ckpt_path="lightning_logs/version_0/checkpoints/last.ckpt"' in result.new
    assert 'load_from_checkpoint("lightning_logs/version_0/checkpoints/best.ckpt")' in result.new
    assert result.counts["lightning_logs/ -> xtrain_logs/"] == 1
