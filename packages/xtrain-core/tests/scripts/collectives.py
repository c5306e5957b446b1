"""Two ranks of a minimal ParallelStrategy (started by the test with LOCAL_RANK set): collectives core relies on."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from xtrain.core._internal.resolve import resolve
from xtrain.core._internal.rng import collect_rng_states, restore_rng_states
from xtrain.core.parallel import ParallelStrategy


class Plain(ParallelStrategy):
    name: ClassVar[str] = "plain_parallel"


def main(out: Path) -> None:
    strategy = resolve(accelerator="cpu", devices=2, strategy=Plain()).strategy
    strategy.setup_environment()
    rank = strategy.global_rank
    np.random.seed(rank)
    states = strategy.all_gather_object(collect_rng_states())  # uint32 numpy keys travel through a pickle
    restore_rng_states(states[rank])
    record = {
        "rank": rank, "processes_per_node": strategy.processes_per_node,
        "scalar": strategy.all_gather(torch.tensor(float(rank))).tolist(),
        "matrix": strategy.all_gather(torch.full((2, 3), rank)).tolist(),
        "numpy_keys_equal": bool((states[rank]["numpy"][1].numpy() == np.random.get_state()[1]).all()),
        "other_keys_differ": bool((states[0]["numpy"][1] != states[1]["numpy"][1]).any()),
    }
    strategy.teardown()
    (out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
