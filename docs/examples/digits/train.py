"""Train the digits classifier; prints the validation accuracy (at least 0.95 after the default 30 epochs).

    python docs/examples/digits/train.py [--devices 2 --strategy ddp] [--max-epochs 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from digits import DigitsClassifier, DigitsData

from xtrain.core import Trainer, seed_everything


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-epochs", type=int, default=30)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--root", default="runs/digits")
    args = parser.parse_args()
    seed_everything(0)
    trainer = Trainer(accelerator=args.accelerator, devices=args.devices, strategy=args.strategy,
                      precision=args.precision, max_epochs=args.max_epochs, default_root_dir=args.root)
    trainer.fit(DigitsClassifier(), datamodule=DigitsData())
    if trainer.is_global_zero:
        acc = float(trainer.callback_metrics["val_acc"])
        print(f"validation accuracy: {acc:.4f} (checkpoints and logs in {trainer.log_dir})")


if __name__ == "__main__":
    main()
