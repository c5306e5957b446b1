"""Run in a venv holding only the xtrain-core wheel and torch: it trains on CPU, and names what is missing.

Checks that a user who installs nothing but xtrain-core can train a model, and that asking for a plugin from
another package fails before anything starts with the exact ``pip install`` line.
"""

from __future__ import annotations

import tempfile

from smoke_model import Tiny, loader
from xtrain.core import ConfigError, Trainer


def main() -> None:
    data = loader()  # seeds torch first, as before the model is built
    module = Tiny()
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(max_epochs=3, default_root_dir=root, enable_progress_bar=False)
        trainer.fit(module, data)
        assert trainer.checkpoint_callback is not None and trainer.checkpoint_callback.last_model_path
    assert module.losses[-1] < module.losses[0] * 0.8, module.losses
    print(f"trained on CPU with xtrain-core alone: loss {module.losses[0]:.3f} -> {module.losses[-1]:.3f}")
    for kwargs, hint in [({"strategy": "ddp"}, "pip install xtrain-strategies"),
                         ({"devices": 2}, "pip install xtrain-strategies"),
                         ({"precision": "bf16-mixed"}, "pip install xtrain-precision"),
                         ({"accelerator": "cuda"}, "pip install xtrain-accelerators"),
                         ({"accelerator": "gpu"}, "pip install xtrain-accelerators"),
                         ({"accelerator": "tpu"}, "pip install 'xtrain-accelerators[xla]'"),
                         ({"strategy": "xla_spmd"}, "pip install 'xtrain-accelerators[xla]'")]:
        try:
            Trainer(**kwargs)  # type: ignore[arg-type]
        except ConfigError as err:
            assert hint in str(err), f"{kwargs}: {err}"
            print(f"Trainer({kwargs}) -> {err}")
        else:
            raise AssertionError(f"Trainer({kwargs}) did not fail")


if __name__ == "__main__":
    main()
