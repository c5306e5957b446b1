"""Whether Python runs interactively (a REPL or a notebook), where re-executing the script is impossible."""

from __future__ import annotations

import sys

__all__ = ["is_interactive"]


def is_interactive() -> bool:
    """True in a REPL, ``python -i``, IPython or a Jupyter kernel."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "ipykernel" in sys.modules
