"""Fail when a package's public API broke since its last release tag without a major version bump.

    python tools/check_api.py                  # every package that has a release tag
    python tools/check_api.py xtrain-core      # one package
    python tools/check_api.py --repo PATH      # another checkout (used by its own test)

Each package is compared only with its own last tag (``<dist>-v<version>``), loaded from git by griffe. Private
names (a leading underscore, ``_internal``) are not API.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import griffe

from packages import ROOT, Package, all_packages, package, release_tags, version_tuple


def _public(breakage: griffe.Breakage) -> bool:
    path = breakage.obj.path
    return not any(part.startswith("_") for part in path.split("."))


def check(pkg: Package, repo: Path) -> list[str]:
    if pkg.module is None:
        return []
    tags = release_tags(pkg, repo)
    if not tags:
        print(f"{pkg.dist}: no release tag yet, nothing to compare")
        return []
    tag = tags[-1]
    released = tag[len(pkg.tag_prefix):]
    src = repo / "packages" / pkg.dist / "src"
    old = griffe.load_git(pkg.module, ref=tag, repo=repo, search_paths=[f"packages/{pkg.dist}/src"],
                          allow_inspection=False)
    new = griffe.load(pkg.module, search_paths=[str(src)], allow_inspection=False)
    breakages = [b for b in griffe.find_breaking_changes(old, new) if _public(b)]
    current = Package(pkg.dist, repo / "packages" / pkg.dist).version
    print(f"{pkg.dist}: {len(breakages)} breaking change(s) since {tag}; version {released} -> {current}")
    if breakages and version_tuple(current)[0] <= version_tuple(released)[0]:
        return [f"{pkg.dist}: {b.explain()}" for b in breakages] + [
            f"{pkg.dist}: the public API broke since {tag} but the major version did not move. Fix: restore the API "
            f"(deprecate instead of removing), or run: python tools/release.py {pkg.dist} major"]
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("packages", nargs="*")
    parser.add_argument("--repo", type=Path, default=ROOT)
    args = parser.parse_args()
    pkgs = [package(d) for d in args.packages] if args.packages else all_packages()
    problems = [p for pkg in pkgs for p in check(Package(pkg.dist, args.repo / "packages" / pkg.dist), args.repo)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
