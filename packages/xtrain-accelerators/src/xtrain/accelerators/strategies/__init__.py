"""The XLA strategies: ``single_xla`` (one device), ``xla`` (one process per device) and ``xla_spmd`` (sharded batch).

They live beside the XLA accelerator because they are its only users and plugins never depend on each other.
"""

__all__: list[str] = []
