"""Lightning 1.x-era scripts through ``xtrain migrate``, and the hint for imports renamed by hand."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import xtrain.core
from xtrain.core._internal.migrate.source import migrate_python
from xtrain.core.migrate import migrate_source


def migrate(code: str) -> str:
    return migrate_source(textwrap.dedent(code))


def notes(code: str) -> list[str]:
    return [message for _, message in migrate_python(textwrap.dedent(code)).attention]


def counts(code: str) -> list[str]:
    return list(migrate_python(textwrap.dedent(code)).counts)


def test_lightning_1x_keywords_of_trainer_methods_are_renamed() -> None:
    code = """\
        import pytorch_lightning as pl

        trainer = pl.Trainer()
        trainer.fit(model, train_dataloader=dl, val_dataloaders=vl)
        trainer.validate(model, val_dataloaders=vl)
        trainer.test(model, test_dataloaders=tl, ckpt_path="best")
        trainer.predict(model, dataloaders=pl_, return_predictions=True)
        self.trainer.test(test_dataloaders=tl)
        """
    out = migrate(code)
    assert "trainer.fit(model, train_dataloaders=dl, val_dataloaders=vl)" in out
    assert "trainer.validate(model, dataloaders=vl)" in out
    assert 'trainer.test(model, dataloaders=tl, ckpt_path="best")' in out
    assert "trainer.predict(model, dataloaders=pl_, return_predictions=True)" in out
    assert "self.trainer.test(dataloaders=tl)" in out
    assert "# xtrain migrate" not in out
    assert "trainer.fit(train_dataloader=) -> train_dataloaders=" in counts(code)


def test_old_and_new_keyword_together_are_flagged_not_duplicated() -> None:
    code = """\
        from lightning.pytorch import Trainer

        trainer = Trainer()
        trainer.test(model, test_dataloaders=a, dataloaders=b)
        """
    assert "trainer.test(model, test_dataloaders=a, dataloaders=b)" in migrate(code)
    assert notes(code) == ["test_dataloaders= and dataloaders= are both given: keep dataloaders= and remove "
                           "test_dataloaders="]


def test_unknown_trainer_method_keyword_note_names_the_method() -> None:
    found = notes("""\
        from lightning.pytorch import Trainer

        trainer = Trainer()
        trainer.fit(model, not_a_keyword=1)
        """)
    from xtrain.core import __version__

    assert found == [f"trainer.fit(not_a_keyword=) is not accepted by xtrain (the installed xtrain-core "
                     f"{__version__}): remove it"]


def test_progress_bar_refresh_rate() -> None:
    code = """\
        import pytorch_lightning as pl

        a = pl.Trainer(progress_bar_refresh_rate=20, max_epochs=1)
        b = pl.Trainer(progress_bar_refresh_rate=0, enable_progress_bar=True)
        c = pl.Trainer(progress_bar_refresh_rate=args.rate)
        """
    out = migrate(code)
    assert "a = Trainer(max_epochs=1)" in out
    assert "b = Trainer(enable_progress_bar=True)" in out
    assert "c = Trainer()" in out
    assert notes(code) == ["progress_bar_refresh_rate=args.rate was removed: if it can be 0, pass "
                           "enable_progress_bar=(args.rate) != 0; for a slower bar pass "
                           "callbacks=[ProgressBar(refresh_interval=SECONDS)] (xtrain.core.callbacks)"]
    assert ("Trainer(progress_bar_refresh_rate=N) removed: the bar refreshes by time; for a slower bar pass "
            "callbacks=[ProgressBar(refresh_interval=SECONDS)] (xtrain.core.callbacks)") in counts(code)


def test_resume_from_checkpoint_moves_to_the_one_fit_call() -> None:
    code = """\
        import pytorch_lightning as pl

        def main(args):
            trainer = pl.Trainer(max_epochs=3, resume_from_checkpoint=args.ckpt)
            trainer.fit(model, dm)
        """
    out = migrate(code)
    assert "trainer = Trainer(max_epochs=3)" in out
    assert "trainer.fit(model, dm, ckpt_path=args.ckpt)" in out
    assert not notes(code)


@pytest.mark.parametrize("fits", ["trainer.fit(model)\ntrainer.fit(model)", "trainer.fit(model, ckpt_path='x')", ""])
def test_resume_from_checkpoint_is_flagged_when_the_fit_call_is_not_clear(fits: str) -> None:
    code = "from lightning.pytorch import Trainer\n\ntrainer = Trainer(resume_from_checkpoint='a.ckpt')\n" + fits + "\n"
    out = migrate(code)
    assert "trainer = Trainer(resume_from_checkpoint='a.ckpt')" in out
    assert notes(code) == ["resume_from_checkpoint= is not a Trainer argument: remove it and pass "
                           "ckpt_path='a.ckpt' to trainer.fit(...) instead"]


def test_from_argparse_args_is_flagged_and_its_keywords_migrated() -> None:
    code = """\
        import pytorch_lightning as pl

        trainer = pl.Trainer.from_argparse_args(args, gpus=2, precision=16)
        """
    assert 'trainer = Trainer.from_argparse_args(args, devices=2, precision="16-mixed", accelerator="gpu")' in (
        migrate(code))
    assert notes(code) == ["Trainer.from_argparse_args: Lightning 1.x: pass Trainer(**vars(args)) or use XtrainCLI"]


def test_lightning_1x_names_and_arguments() -> None:
    code = """\
        from pytorch_lightning.core.lightning import LightningModule
        from pytorch_lightning.callbacks import ModelCheckpoint
        from pytorch_lightning.utilities.cli import LightningCLI
        from pytorch_lightning.plugins import DDPPlugin
        from pytorch_lightning.metrics import Accuracy

        class M(LightningModule):
            def training_epoch_end(self, outputs):
                pass

        ckpt = ModelCheckpoint(period=2)
        trainer.progress_bar_dict
        LightningCLI(M, save_config_overwrite=True)
        """
    out = migrate(code)
    assert "from xtrain.core.cli import XtrainCLI" in out
    assert "ckpt = ModelCheckpoint(every_n_epochs=2)" in out
    assert "trainer.progress_bar_metrics" in out
    found = notes(code)
    assert any(n.startswith("training_epoch_end: removed in Lightning 2.0") for n in found)
    assert "DDPPlugin: Lightning 1.x: pass strategy=DDPStrategy(...) from xtrain.strategies instead of plugins=" in found
    assert any(n.startswith("Accuracy: Lightning 1.x: import it from torchmetrics") for n in found)
    assert any(n.startswith("save_config_overwrite=: Lightning 1.x: pass save_config_kwargs=") for n in found)


# -- imports renamed by hand --------------------------------------------------------------------------------------

_TRAIN_MODULE_HINT = ("xtrain's name for Lightning's LightningModule is TrainModule: from xtrain.core import "
                      "TrainModule. To convert a whole Lightning script, run: xtrain migrate <file>")


def _stderr_of(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    return result.stderr.strip().splitlines()[-1]


def test_from_import_of_a_lightning_name_says_what_to_import() -> None:
    """Run in a real interpreter: CPython turns an AttributeError in ``from`` imports into its own ImportError."""
    assert _stderr_of("from xtrain.core import LightningModule") == (
        f"ImportError: cannot import name 'LightningModule' from 'xtrain.core'; {_TRAIN_MODULE_HINT}")
    assert "from xtrain.core import DataModule" in _stderr_of("from xtrain.core import Trainer, LightningDataModule")
    assert "from xtrain.core import Engine" in _stderr_of("from xtrain.core import Fabric")


def test_attribute_of_a_lightning_name_says_what_to_use() -> None:
    assert _stderr_of("import xtrain.core as pl\npl.LightningModule") == (
        f"AttributeError: module 'xtrain.core' has no attribute 'LightningModule'; {_TRAIN_MODULE_HINT}")
    with pytest.raises(AttributeError, match=r"from xtrain\.core\.cli import XtrainCLI"):
        xtrain.core.LightningCLI
    with pytest.raises(AttributeError, match=r"has no xtrain equivalent: use jsonargparse\.ArgumentParser"):
        xtrain.core.LightningArgumentParser


def test_hasattr_stays_false_and_other_names_keep_the_plain_error() -> None:
    assert not hasattr(xtrain.core, "LightningModule")
    assert getattr(xtrain.core, "LightningDataModule", None) is None
    with pytest.raises(AttributeError, match=r"^module 'xtrain.core' has no attribute 'not_a_name'$"):
        xtrain.core.not_a_name
    with pytest.raises(ImportError, match=r"cannot import name 'NotAName' from 'xtrain.core' \("):
        exec("from xtrain.core import NotAName", {})


def test_the_hint_does_not_import_libcst() -> None:
    code = ("import sys\ntry:\n    from xtrain.core import LightningModule\nexcept ImportError:\n    pass\n"
            "print('libcst' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_more_positional_arguments_than_the_installed_callable_takes_are_flagged() -> None:
    """Lightning's ``LearningRateMonitor("step", True)`` passes ``log_momentum`` by position; xtrain takes it by
    keyword only, so the converted line would raise a TypeError: the tool says so instead of passing it silently."""
    code = """\
        from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint

        a = LearningRateMonitor("step", True)
        b = LearningRateMonitor("step", log_momentum=True)
        c = ModelCheckpoint("ckpts", "{epoch}")
        """
    assert notes(code) == ["LearningRateMonitor(...) takes 1 argument(s) by position in the installed xtrain "
                           "(logging_interval) and this call passes 2: pass the others by keyword"]
