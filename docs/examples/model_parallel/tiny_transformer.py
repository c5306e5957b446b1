"""A tiny transformer trained with tensor parallelism and sharding on a 2-D mesh (the model-parallel guide's example).

    python tiny_transformer.py                      # 4 processes: tensor_parallel=2 x data_parallel_shard=2
    python tiny_transformer.py --devices 1          # the same model on one process, for comparison

Attention heads and the MLP's hidden units are split over ``tensor_parallel`` (``ColwiseParallel`` in,
``RowwiseParallel`` out); every block, then the whole model, is sharded over the data-parallel dimensions with
``fully_shard``. With ``build_in_configure_model=True`` the blocks are created inside ``configure_model``: on the meta
device, so each process only ever allocates its own shards.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Trainer, TrainModule


class Block(nn.Module):
    """Pre-norm attention + MLP. Head count is read from the local width, so it works on a slice of the heads."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.out = (nn.Linear(dim, dim) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm1(x)
        q, k, v = (proj(h).view(b, t, -1, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attn.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))



def tensor_parallel_plan() -> dict[str, Any]:
    """Which linear layers of a block are split by output (columns) and which by input (rows)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "out": RowwiseParallel(),
            "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}


class TinyTransformer(TrainModule):
    def __init__(self, *, vocab: int = 64, dim: int = 32, heads: int = 4, depth: int = 2, classes: int = 4,
                 build_in_configure_model: bool = False, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, classes)
        self.blocks: nn.ModuleList | None = None if build_in_configure_model else self._blocks()

    def _blocks(self) -> nn.ModuleList:
        return nn.ModuleList(Block(self.hparams["dim"], self.hparams["heads"]) for _ in range(self.hparams["depth"]))

    def configure_model(self) -> None:
        if self.blocks is None:
            self.blocks = self._blocks()  # on the meta device under model_parallel
        mesh = self.device_mesh
        if mesh is None:
            return
        from torch.distributed.fsdp import FSDPModule, fully_shard
        from torch.distributed.tensor.parallel import parallelize_module

        if isinstance(self, FSDPModule):  # set up by an earlier stage: the hook runs at each, as in Lightning
            return
        if mesh["tensor_parallel"].size() > 1:
            for block in self.blocks:
                parallelize_module(block, mesh["tensor_parallel"], tensor_parallel_plan())
        data_parallel = mesh["data_parallel_replicate", "data_parallel_shard"]
        for block in self.blocks:
            fully_shard(block, mesh=data_parallel)
        fully_shard(self, mesh=data_parallel)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        assert self.blocks is not None
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        tokens, labels = batch
        loss = F.cross_entropy(self(tokens), labels)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])


def token_data(samples: int = 64, length: int = 8, vocab: int = 64, classes: int = 4) -> TensorDataset:
    """Sequences whose label is their first token's class: learnable, made here, no download."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (samples, length), generator=g)
    return TensorDataset(tokens, tokens[:, 0] % classes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--tensor-parallel", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    strategy: Any = "auto"
    if args.devices > 1:
        from xtrain.strategies import ModelParallelStrategy

        strategy = ModelParallelStrategy(tensor_parallel=args.tensor_parallel)
    per_rank = 16 // max(1, args.devices // args.tensor_parallel)
    trainer = Trainer(accelerator="cpu", devices=args.devices, strategy=strategy, max_epochs=3, logger=False,
                      enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(TinyTransformer(), DataLoader(token_data(), batch_size=per_rank))


if __name__ == "__main__":
    main()
