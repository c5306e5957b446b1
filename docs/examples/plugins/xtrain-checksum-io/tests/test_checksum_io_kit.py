from xtrain.core.testing import CheckpointIOConformance


class TestChecksumIO(CheckpointIOConformance):
    checkpoint_io = "checksum"
