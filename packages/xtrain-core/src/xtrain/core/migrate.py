"""Rewrite PyTorch Lightning code and LightningCLI configs to xtrain: ``xtrain migrate PATH...``.

Imports, class names, Trainer arguments and the Lightning idioms with an xtrain equivalent are rewritten with LibCST,
so comments and formatting survive; what has no equivalent stays in place under a ``# xtrain migrate:`` comment that
says what to do. ``--check`` writes nothing and exits 1 if anything would change; ``--diff`` prints the changes.
Needs the ``migrate`` extra: ``pip install 'xtrain-core[migrate]'``.

The rules are one table (``docs/migration.md`` is generated from it): ``python -m xtrain.core.migrate --write-docs
docs/migration.md``.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main", "migrate_source"]


def migrate_source(code: str) -> str:
    """Return ``code`` (Python source written for Lightning) rewritten for xtrain."""
    from xtrain.core._internal.migrate.source import migrate_python

    result = migrate_python(code)
    if result.error:
        raise ValueError(result.error)
    return result.new


def main(argv: list[str] | None = None) -> int:
    """Run ``xtrain migrate``; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--write-docs"]:
        from xtrain.core._internal.migrate.docs import write_docs

        return write_docs(argv[1] if len(argv) > 1 else "docs/migration.md")
    try:
        import libcst  # noqa: F401
    except ImportError:
        print("xtrain migrate needs LibCST. Fix: pip install 'xtrain-core[migrate]'", file=sys.stderr)
        return 2
    from xtrain.core._internal.migrate.runner import add_arguments, run

    parser = add_arguments(argparse.ArgumentParser(
        prog="xtrain migrate", description="Rewrite PyTorch Lightning code and LightningCLI YAML configs to xtrain, "
                                           "in place (or --check / --diff)."))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
