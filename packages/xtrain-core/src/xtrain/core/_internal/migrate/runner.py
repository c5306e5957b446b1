"""``xtrain migrate PATH...``: find the files, migrate each, write or show the result, print the summary."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from xtrain.core._internal.migrate.source import Result, migrate_python

__all__ = ["add_arguments", "migrate_file", "run"]

_SKIP = {".git", ".venv", "venv", "__pycache__", "node_modules", ".tox", ".nox", "build", "dist"}
_YAML = (".yaml", ".yml")


def add_arguments(parser: Any) -> Any:
    """Declare the options on ``parser`` (argparse's, or jsonargparse's for ``xtrain --help``)."""
    parser.add_argument("paths", nargs="+", help="Python files, LightningCLI YAML configs, or folders of them.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="Write nothing; exit 1 if any file would change or "
                                                          "still has a `from lightning... import *`.")
    mode.add_argument("--diff", action="store_true", help="Write nothing; print a unified diff of the changes.")
    parser.add_argument("--quiet", action="store_true", help="Print only the totals and the items needing attention.")
    return parser


def _files(paths: list[str]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for found in sorted(path.rglob("*")):
                if found.suffix in (".py", *_YAML) and found.is_file() and not _SKIP & set(found.parts):
                    yield found
        else:
            yield path


def migrate_file(path: Path) -> Result:
    text = path.read_text(encoding="utf-8")
    if path.suffix in _YAML:
        from xtrain.core._internal.migrate.config import migrate_yaml

        return migrate_yaml(text)
    return migrate_python(text)


def run(args: argparse.Namespace | Any, out: TextIO | None = None) -> int:
    """Migrate ``args.paths``; 0 on success, 1 with ``--check`` when something would change, 2 on unreadable input."""
    out = out or sys.stdout
    totals: Counter[str] = Counter()
    changed: list[Path] = []
    stars: list[Path] = []
    attention: list[str] = []
    failed = False
    files = list(_files(list(args.paths)))
    for path in files:
        if not path.is_file():
            print(f"xtrain migrate: error: {path}: no such file or folder", file=sys.stderr)
            failed = True
            continue
        result = migrate_file(path)
        if result.error:
            print(f"xtrain migrate: error: {path}: {result.error}", file=sys.stderr)
            failed = True
            continue
        totals.update(result.counts)
        attention += [f"{path}:{line}: {message}" for line, message in result.attention]
        if result.stars:
            stars.append(path)
        if not result.changed:
            continue
        changed.append(path)
        if args.diff:
            out.writelines(difflib.unified_diff(result.old.splitlines(keepends=True),
                                                result.new.splitlines(keepends=True), f"a/{path}", f"b/{path}"))
        elif not args.check:
            path.write_text(result.new, encoding="utf-8")
    verb = "would change" if args.check or args.diff else "changed"
    print(f"xtrain migrate: {len(files)} file(s) read, {len(changed)} {verb}", file=out)
    if not getattr(args, "quiet", False):
        for path in changed:
            print(f"  {verb}: {path}", file=out)
        if totals:
            print("rewrites per rule:", file=out)
            for label, n in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"  {n:4d}  {label}", file=out)
    if attention:
        print(f"needs attention ({len(attention)}; marked `# xtrain migrate:` in the code):", file=out)
        for item in attention:
            print(f"  {item}", file=out)
    if failed:
        return 2
    if args.check and stars:
        print(f"not migrated ({len(stars)}; a `*` import of Lightning cannot be rewritten): "
              + ", ".join(map(str, stars)), file=out)
    return 1 if args.check and (changed or stars) else 0
