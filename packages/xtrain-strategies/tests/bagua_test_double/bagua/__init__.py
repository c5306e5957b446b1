"""TEST DOUBLE of Bagua 0.9 (``bagua``): NOT Bagua. Bagua needs CUDA and NCCL and cannot run on these machines.

It imitates the part of ``bagua.torch_api`` that :class:`xtrain.strategies.bagua.BaguaStrategy` calls (the names and
signatures of Bagua 0.9.2, read from its sdist), runs on gloo so the glue can train on 2 CPU processes, and records
every call in ``$BAGUA_TEST_DOUBLE_LOG.rank<N>.json`` for the tests to check. Nothing here is Bagua's code.
"""
