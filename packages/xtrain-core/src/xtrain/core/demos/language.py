"""A word-level language model and the WikiText-2 text it is usually trained on, for examples and tests."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from xtrain.core.demos._download import ensure

__all__ = ["Transformer", "WikiText2"]

_WIKITEXT2_URL = "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt"


class Transformer(nn.Module):
    """A causal (decoder-only) Transformer over word ids that returns log-probabilities of the next word.

    ``forward(inputs, target)`` returns a ``(batch * seq_len, vocab_size)`` tensor of log-probabilities, so that
    ``F.nll_loss(output, target.view(-1))`` is the training loss. ``target`` is accepted for scripts that pass it but
    not read: position ``i`` sees only ``inputs[:, :i + 1]`` (a causal mask), so nothing of the target leaks in.
    """

    def __init__(self, vocab_size: int = 33278, ninp: int = 200, nhead: int = 2, nhid: int = 200, nlayers: int = 2,
                 dropout: float = 0.2) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.ninp = ninp
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout, batch_first=True)
        self.layers = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.decoder = nn.Linear(ninp, vocab_size)

    def positions(self, length: int, device: torch.device) -> Tensor:
        """Sinusoidal position codes ``(length, ninp)``: fixed, so any sequence length works without training."""
        position = torch.arange(length, device=device, dtype=torch.float32).unsqueeze(1)
        rates = torch.exp(torch.arange(0, self.ninp, 2, device=device, dtype=torch.float32)
                          * (-math.log(10000.0) / self.ninp))
        codes = torch.zeros(length, self.ninp, device=device)
        codes[:, 0::2] = torch.sin(position * rates)
        codes[:, 1::2] = torch.cos(position * rates)[:, : self.ninp // 2]
        return codes

    def forward(self, inputs: Tensor, target: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        length = inputs.size(1)
        if mask is None:
            mask = nn.Transformer.generate_square_subsequent_mask(length, device=inputs.device)
        x = self.embedding(inputs) * math.sqrt(self.ninp) + self.positions(length, inputs.device)
        x = self.layers(self.dropout(x), mask=mask, is_causal=True)
        logits: Tensor = self.decoder(x)
        return torch.log_softmax(logits, dim=-1).view(-1, self.vocab_size)


class WikiText2(Dataset[tuple[Tensor, Tensor]]):
    """WikiText-2 training text as word ids in blocks: item ``i`` is ``(words, the same words one step later)``.

    Words are split on whitespace with an ``<eos>`` word at each line end; ids follow the order words first appear.
    The text is downloaded once into ``data_dir`` (a public copy from the PyTorch examples) when missing.
    """

    def __init__(self, data_dir: str | Path = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        path = ensure(Path(data_dir) / "wikitext-2.txt", _WIKITEXT2_URL, download=download, argument="data_dir")
        self.block_size = block_size
        self.words: dict[str, int] = {}
        ids: list[int] = []
        with path.open(encoding="utf-8") as text:
            for line in text:
                for word in [*line.split(), "<eos>"]:
                    ids.append(self.words.setdefault(word, len(self.words)))
        self.data = torch.tensor(ids, dtype=torch.long)

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def __len__(self) -> int:
        return max(0, (len(self.data) - 1) // self.block_size)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        start = index * self.block_size
        end = start + self.block_size
        return self.data[start:end], self.data[start + 1:end + 1]
