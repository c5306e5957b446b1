"""Every registered strategy passes xtrain-core's conformance kit, with two ranks where that means something."""

from __future__ import annotations

from xtrain.core.testing import StrategyConformance


class TestDDP(StrategyConformance):
    strategy = "ddp"
    devices = 2


class TestDDPSpawn(StrategyConformance):
    strategy = "ddp_spawn"
    devices = 2


class TestDDPFork(StrategyConformance):
    strategy = "ddp_fork"
    devices = 2


class TestDDPNotebook(StrategyConformance):
    strategy = "ddp_notebook"
    devices = 2


class TestDDPFindUnused(StrategyConformance):
    strategy = "ddp_find_unused_parameters_true"
    devices = 2


class TestDDPSpawnFindUnused(StrategyConformance):
    strategy = "ddp_spawn_find_unused_parameters_true"
    devices = 2


class TestDDPForkFindUnused(StrategyConformance):
    strategy = "ddp_fork_find_unused_parameters_true"
    devices = 2


class TestDDPNotebookFindUnused(StrategyConformance):
    strategy = "ddp_notebook_find_unused_parameters_true"
    devices = 2


class TestDP(StrategyConformance):
    """One CPU device (the documented CPU behaviour); two GPUs are covered by the gpu-marked tests."""

    strategy = "dp"
    devices = 1


class TestDDP2(StrategyConformance):
    """One process per node on CPU; the two-node run is in test_dp_ddp2.py."""

    strategy = "ddp2"
    devices = 1


class TestFSDP(StrategyConformance):
    """Sharded checkpoints: the probe saves a directory and reads it back into its shards."""

    strategy = "fsdp"
    devices = 2
