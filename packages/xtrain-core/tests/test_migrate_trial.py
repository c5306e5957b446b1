"""``xtrain migrate`` defects an outside trial found: demo networks, trainer.state, shadowed names, gpus=0, the
kept ``pl`` import, and the layout of multi-line Trainer calls."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("libcst")

from migrate_helpers import messages, run


def test_demo_networks_that_differ_are_flagged_not_renamed() -> None:
    result = run("""\
        from lightning.pytorch.demos import Transformer, WikiText2, BoringModel
        from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule
        """)
    assert "from xtrain.core.demos import BoringModel\n" in result.new
    assert "from lightning.pytorch.demos import Transformer, WikiText2\n" in result.new
    assert "from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule\n" in result.new
    found = messages(result)
    assert any(m.startswith("Transformer: xtrain.core.demos.Transformer is another network") and
               "copy Lightning's definition into your project" in m for m in found)
    assert any(m.startswith("WikiText2:") for m in found) and any(m.startswith("MNISTDataModule:") for m in found)


def test_trainer_state_fn_becomes_state_and_stage_status_are_flagged() -> None:
    result = run("""\
        from lightning.pytorch import Trainer
        from lightning.pytorch.trainer.states import TrainerFn

        trainer = Trainer()
        if trainer.state.fn == "fit":
            print(trainer.state.status, trainer.state.stage)
        """)
    assert 'if trainer.state == "fit":' in result.new
    assert "trainer.state.fn.value" not in result.new
    found = messages(result)
    assert any(m.startswith("trainer.state.stage: xtrain has no running stage: use trainer.training") for m in found)
    assert any(m.startswith("trainer.state.status: xtrain keeps no run status") for m in found)
    assert "TrainerFn" not in result.new  # imported but unused: nothing needs Lightning's enum any more
    assert result.counts["trainer.state.fn -> trainer.state"] == 1


def test_trainer_state_fn_value_is_flagged_not_half_rewritten() -> None:
    result = run("""\
        import lightning as L
        trainer = L.Trainer()
        print(trainer.state.fn.value)
        """)
    assert "print(trainer.state.fn.value)" in result.new
    assert any(m.startswith("trainer.state.fn.value: trainer.state is already the string") for m in messages(result))


def test_name_the_file_defines_is_imported_under_an_alias() -> None:
    result = run("""\
        import pytorch_lightning as pl

        class DataModule(pl.LightningDataModule):
            pass

        class OtherData(pl.LightningDataModule):
            pass
        """)
    assert "from xtrain.core import DataModule as XtrainDataModule\n" in result.new
    assert "class DataModule(XtrainDataModule):" in result.new
    assert "class OtherData(XtrainDataModule):" in result.new
    assert "xtrain.core.DataModule imported as XtrainDataModule (the file binds DataModule itself)" in result.counts


def test_alias_for_a_from_import_and_for_a_name_imported_from_elsewhere() -> None:
    result = run("""\
        from lightning.pytorch import LightningModule, Trainer
        from mylib import TrainModule

        class Net(LightningModule):
            pass
        """)
    assert "from xtrain.core import TrainModule as XtrainTrainModule, Trainer\n" in result.new
    assert "from mylib import TrainModule\n" in result.new
    assert "class Net(XtrainTrainModule):" in result.new


@pytest.mark.parametrize(("given", "expected"), [
    ("gpus=0", 'accelerator="cpu"'),
    ("gpus=None", 'accelerator="cpu"'),
    ('gpus="0"', 'accelerator="cpu"'),
    ("tpu_cores=None", 'accelerator="cpu"'),
    ("gpus=-1", 'devices=-1, accelerator="gpu"'),
    ('gpus="0,1"', 'devices="0,1", accelerator="gpu"'),
    ('gpus="2"', 'devices=2, accelerator="gpu"'),
    ("gpus=[0]", 'devices=[0], accelerator="gpu"'),
])
def test_lightning_1x_gpus_values(given: str, expected: str) -> None:
    result = run(f"import pytorch_lightning as pl\ntrainer = pl.Trainer({given})\n")
    assert f"trainer = Trainer({expected})\n" in result.new
    assert not result.attention


def test_gpus_expression_gets_the_exact_replacement() -> None:
    result = run("import pytorch_lightning as pl\ntrainer = pl.Trainer(gpus=args.gpus)\n")
    assert 'trainer = Trainer(devices=args.gpus, accelerator="gpu")' in result.new
    assert any('write accelerator="gpu" if args.gpus else "cpu", devices=args.gpus or 1' in m
               for m in messages(result))


def test_kept_module_import_says_to_delete_it() -> None:
    result = run("""\
        import pytorch_lightning as pl

        trainer = pl.Trainer()
        acc = pl.metrics.Accuracy()
        """)
    assert "import pytorch_lightning as pl\n" in result.new
    assert (1, "`import pytorch_lightning as pl` stays only for the flagged pl.metrics.Accuracy: delete it once those "
               "lines are rewritten") in result.attention


def test_multiline_trainer_call_keeps_one_argument_per_line() -> None:
    result = run("""\
        import pytorch_lightning as pl
        trainer = pl.Trainer(
            gpus=2,
            max_epochs=3,  # why
            weights_summary=None,
        )
        """)
    assert result.new.endswith(textwrap.dedent("""\
        trainer = Trainer(
            devices=2,
            max_epochs=3,  # why
            accelerator="gpu",
            enable_model_summary=False,
        )
        """))


def test_single_line_trainer_call_stays_on_one_line() -> None:
    result = run("import pytorch_lightning as pl\ntrainer = pl.Trainer(gpus=2, auto_select_gpus=True)\n")
    assert 'trainer = Trainer(devices=2, accelerator="gpu")\n' in result.new
