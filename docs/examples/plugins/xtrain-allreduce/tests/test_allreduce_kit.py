from xtrain.core.testing import StrategyConformance


class TestAllReduce(StrategyConformance):
    strategy = "allreduce"
    devices = 2  # two real processes: the strategy's own launcher starts the second

