"""Run in a venv holding only the xtrain-core and xtrain-strategies wheels and torch.

It trains with ``ddp`` on two CPU processes, and refuses ``bf16-mixed`` with the install line of xtrain-precision.
"""

from __future__ import annotations

import sys
import tempfile

from smoke_model import Tiny, loader
from xtrain.core import ConfigError, Trainer


def main() -> None:
    try:
        Trainer(precision="bf16-mixed", accelerator="cpu")
    except ConfigError as err:
        assert "Fix: pip install xtrain-precision" in str(err), err
        print(f"refused as expected: {err}", flush=True)
    else:
        raise AssertionError("bf16-mixed should need xtrain-precision")
    data = loader()  # seeds torch first, as before the model is built
    module = Tiny()
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=3, default_root_dir=root,
                          enable_progress_bar=False, enable_model_summary=False, logger=False)
        trainer.fit(module, data)
        assert trainer.world_size == 2
    assert module.losses[-1] < module.losses[0], module.losses
    if trainer.is_global_zero:
        print(f"ddp on 2 processes with xtrain-core + xtrain-strategies: loss {module.losses[0]:.3f} -> "
              f"{module.losses[-1]:.3f}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
