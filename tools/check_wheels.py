"""Checks built wheels: one PEP 420 namespace (no ``xtrain/__init__.py`` anywhere) and versions as declared.

    python tools/check_wheels.py dist/
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def declared_version(dist_name: str) -> str:
    package = ROOT / "packages" / dist_name
    about = list(package.glob("src/xtrain/*/__about__.py"))
    text = about[0].read_text() if about else (package / "pyproject.toml").read_text()
    match = re.search(r'^(?:__version__|version)\s*=\s*"([^"]+)"', text, re.MULTILINE)
    assert match, f"no version found for {dist_name}"
    return match.group(1)


def main(dist: str) -> int:
    problems = []
    wheels = sorted(Path(dist).glob("*.whl"))
    if not wheels:
        problems.append(f"no wheels in {dist}")
    for wheel in wheels:
        name, version = wheel.name.split("-")[:2]
        dist_name = name.replace("_", "-")
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
        if "xtrain/__init__.py" in names:
            problems.append(f"{wheel.name} ships xtrain/__init__.py, which breaks the xtrain.* namespace")
        expected = declared_version(dist_name)
        if version != expected:
            problems.append(f"{wheel.name} has version {version}, packages/{dist_name} declares {expected}")
        print(f"{wheel.name}: {len([n for n in names if n.endswith('.py')])} modules")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "dist"))
