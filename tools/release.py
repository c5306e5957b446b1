"""Release one package: bump its version, roll its changelog, check the pins, print (and optionally create) the tag.

    python tools/release.py xtrain-strategies minor            # 1.0.0 -> 1.1.0, tag xtrain-strategies-v1.1.0
    python tools/release.py xtrain-core major --tag             # also creates the git tag
    python tools/release.py --check                             # only check pins and meta ranges

Packages are released separately: each has its own version, changelog and tag. The meta-package's ranges must
admit every member's version, and plugins pin core with a floor and a ceiling (never each other).
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys

from packages import ROOT, Package, all_packages, bump, package, version_tuple

_REQ = re.compile(r"^(xtrain(?:-[a-z]+)?)(\[[^\]]*\])?\s*>=\s*([\d.]+)\s*,\s*<\s*([\d.]+)$")


def roll_changelog(pkg: Package, version: str) -> None:
    path = pkg.path / "CHANGELOG.md"
    text = path.read_text()
    if "## [Unreleased]" not in text:
        raise SystemExit(f"{path} has no '## [Unreleased]' section")
    date = datetime.date.today().isoformat()
    path.write_text(text.replace("## [Unreleased]", f"## [Unreleased]\n\n## [{version}] - {date}", 1))


def check_pins() -> list[str]:
    """Problems with inter-package pins: every xtrain requirement has a floor and a ceiling that admit the current
    version, plugins depend on core only, and the meta-package's ranges admit every member."""
    problems = []
    versions = {p.dist: p.version for p in all_packages()}
    for pkg in all_packages():
        for requirement in pkg.dependencies:
            name = re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0]
            if not name.startswith("xtrain"):
                continue
            match = _REQ.match(requirement.replace(" ", ""))
            if match is None:
                problems.append(f"{pkg.dist}: {requirement!r} must be 'name>=floor,<ceiling'")
                continue
            dep, _, floor, ceiling = match.groups()
            if pkg.dist != "xtrain" and dep != "xtrain-core":
                problems.append(f"{pkg.dist} depends on {dep}: plugins depend on xtrain-core only")
            if dep in versions and not version_tuple(floor) <= version_tuple(versions[dep]) < version_tuple(ceiling):
                problems.append(f"{pkg.dist} requires {requirement} but {dep} is {versions[dep]}: move the range "
                                f"(and, for the meta-package, bump its major)")
    meta = package("xtrain")
    required = {re.split(r"[\[<>=!~ ]", r, maxsplit=1)[0] for r in meta.dependencies}
    for dist in versions:
        if dist != "xtrain" and dist not in required:
            problems.append(f"the meta-package xtrain does not depend on {dist}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package", nargs="?")
    parser.add_argument("part", nargs="?", choices=["major", "minor", "patch"])
    parser.add_argument("--tag", action="store_true", help="create the git tag (after committing the bump)")
    parser.add_argument("--check", action="store_true", help="only check the pins and meta ranges")
    args = parser.parse_args()
    if not args.check and (args.package is None or args.part is None):
        parser.error("give a package and a part, or --check")
    if not args.check:
        pkg = package(args.package)
        new = bump(pkg.version, args.part)
        pkg.set_version(new)
        roll_changelog(pkg, new)
        print(f"{pkg.dist}: {new}")
    problems = check_pins()
    for problem in problems:
        print(f"PIN PROBLEM: {problem}", file=sys.stderr)
    if problems:
        return 1
    if not args.check:
        tag = f"{pkg.tag_prefix}{new}"
        if args.tag:
            subprocess.run(["git", "-C", str(ROOT), "tag", "-a", tag, "-m", f"{pkg.dist} {new}"], check=True)
        print(f"tag: {tag}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
