"""xtrain.core.demos: the models train, the data sets read the real file formats, migrate points scripts at them."""

from __future__ import annotations

import gzip
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from xtrain.core import Trainer
from xtrain.core.demos import (
    MNIST,
    BoringDataModule,
    BoringModel,
    MNISTDataModule,
    RandomDataset,
    Transformer,
    WikiText2,
)
from xtrain.core.errors import CheckpointError
from xtrain.core.migrate import migrate_source


def _trainer(tmp_path: Path, steps: int = 3) -> Trainer:
    return Trainer(default_root_dir=tmp_path, accelerator="cpu", max_steps=steps, enable_progress_bar=False,
                   logger=False, limit_val_batches=2, limit_test_batches=2)


def _write_idx(path: Path, data: torch.Tensor, magic: int) -> None:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in data.shape)
    path.write_bytes(gzip.compress(header + data.to(torch.uint8).numpy().tobytes()))


def _mnist_fixture(root: Path, train: int = 40, test: int = 12) -> None:
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, n in (("train", train), ("t10k", test)):
        images = torch.arange(n * 28 * 28).remainder(256).view(n, 28, 28)
        _write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", images, 2051)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", torch.arange(n) % 10, 2049)


def test_mnist_reads_idx_files_and_applies_transforms(tmp_path: Path) -> None:
    _mnist_fixture(tmp_path)
    train, test = MNIST(tmp_path, train=True, download=False), MNIST(tmp_path, train=False, download=False)
    assert (len(train), len(test)) == (40, 12)
    image, label = train[3]
    assert image.shape == (1, 28, 28) and label == 3
    assert (image.flatten()[:2] * 255).round().tolist() == [3 * 784 % 256, 3 * 784 % 256 + 1]
    seen: list[object] = []
    MNIST(tmp_path, train=False, download=False, transform=seen.append, target_transform=str)[0]
    assert type(seen[0]).__name__ == "Image" or isinstance(seen[0], torch.Tensor)


def test_mnist_refuses_missing_or_corrupt_files_without_downloading(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="download=False"):
        MNIST(tmp_path, download=False)
    _mnist_fixture(tmp_path)
    (tmp_path / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz").write_bytes(b"\x00\x00\x08\x03rubbish")
    with pytest.raises(CheckpointError, match="not an MNIST IDX file"):
        MNIST(tmp_path, download=False)


def test_mnist_datamodule_trains_a_model(tmp_path: Path) -> None:
    _mnist_fixture(tmp_path)

    class Classifier(BoringModel):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(28 * 28, 10)

        def step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self(x.flatten(1)), y)

    data = MNISTDataModule(tmp_path, val_split=8, batch_size=4, normalize=True)
    model = Classifier()
    before = model.layer.weight.detach().clone()
    _trainer(tmp_path).fit(model, datamodule=data)
    assert not torch.equal(before, model.layer.weight)
    assert data.num_classes == 10 and data.dataset_val is not None and len(data.dataset_val) == 8  # type: ignore[arg-type]


def test_wikitext2_and_transformer_train(tmp_path: Path) -> None:
    (tmp_path / "wikitext-2.txt").write_text(" = Title = \n the cat sat on the mat \n\n a dog sat too \n" * 10)
    data = WikiText2(tmp_path, block_size=5, download=False)
    assert data.vocab_size == 11  # 10 words and <eos>
    inputs, target = data[1]
    assert torch.equal(inputs[1:], target[:-1]) and len(data) == (len(data.data) - 1) // 5
    model = Transformer(vocab_size=data.vocab_size, ninp=16, nhead=2, nhid=32, nlayers=1, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batch = next(iter(DataLoader(data, batch_size=4)))
    losses = []
    for _ in range(20):
        output = model(*batch)
        assert output.shape == (4 * 5, data.vocab_size)
        loss = F.nll_loss(output, batch[1].view(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 2


def test_transformer_is_causal() -> None:
    model = Transformer(vocab_size=7, ninp=8, nhead=2, nhid=16, nlayers=1, dropout=0.0).eval()
    a = torch.tensor([[1, 2, 3, 4]])
    b = torch.tensor([[1, 2, 3, 6]])
    assert torch.allclose(model(a, a)[:3], model(b, b)[:3], atol=1e-6)
    assert not torch.allclose(model(a, a)[3], model(b, b)[3])


def test_boring_model_and_datamodule_train_validate_and_test(tmp_path: Path) -> None:
    model = BoringModel()
    before = model.layer.weight.detach().clone()
    trainer = _trainer(tmp_path)
    trainer.fit(model, datamodule=BoringDataModule())
    assert not torch.equal(before, model.layer.weight)
    trainer.test(model, datamodule=BoringDataModule())
    assert len(RandomDataset(32, 5)) == 5 and RandomDataset(32, 5)[4].shape == (32,)


def test_migrate_points_demos_imports_at_xtrain() -> None:
    """Demos that are the same code are renamed; those that differ from Lightning's (another network, another
    length, other normalization) stay Lightning's with a note, so a migrated run cannot silently change numbers."""
    out = migrate_source(textwrap.dedent("""\
        from pytorch_lightning.demos.boring_classes import BoringModel, RandomDataset, BoringDataModule
        """))
    assert "lightning" not in out and "xtrain migrate:" not in out
    assert "from xtrain.core.demos import BoringModel, RandomDataset, BoringDataModule" in out
    differing = migrate_source(textwrap.dedent("""\
        from lightning.pytorch.demos import Transformer, WikiText2
        from lightning.pytorch.demos.mnist_datamodule import MNIST, MNISTDataModule
        """))
    for name in ("Transformer", "WikiText2", "MNIST", "MNISTDataModule"):
        assert f"# xtrain migrate: {name}: " in differing, name
    assert "xtrain.core.demos" not in differing.replace("xtrain.core.demos.", "")
    rest = migrate_source("from lightning.pytorch.demos.boring_classes import RandomDictDataset\n")
    assert "# xtrain migrate: RandomDictDataset has no xtrain equivalent in xtrain.core.demos" in rest


def test_import_xtrain_core_does_not_load_demos() -> None:
    code = "import sys, xtrain.core; print('xtrain.core.demos' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
