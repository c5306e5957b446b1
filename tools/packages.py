"""What the release and API tools know about the monorepo's packages: names, import paths, versions, pins."""

from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "Package", "all_packages", "bump", "package", "release_tags", "version_tuple"]


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"1.2"`` -> ``(1, 2, 0)``; ``"1.2.3rc1"`` -> ``(1, 2, 3)``."""
    parts = [int(x) for x in re.findall(r"\d+", version)[:3]]
    major, minor, patch = [*parts, 0, 0, 0][:3]
    return major, minor, patch


def bump(version: str, part: str) -> str:
    major, minor, patch = version_tuple(version)
    if part == "major":
        return f"{major + 1}.0.0"
    if part == "minor":
        return f"{major}.{minor + 1}.0"
    if part == "patch":
        return f"{major}.{minor}.{patch + 1}"
    raise ValueError(f"part must be major, minor or patch, not {part!r}")


@dataclass(frozen=True)
class Package:
    dist: str
    path: Path

    @property
    def about(self) -> Path | None:
        found = sorted(self.path.glob("src/xtrain/*/__about__.py"))
        return found[0] if found else None

    @property
    def module(self) -> str | None:
        """The import name (``xtrain.core``), or None for the meta-package."""
        return f"xtrain.{self.about.parent.name}" if self.about else None

    @property
    def version_file(self) -> Path:
        return self.about or self.path / "pyproject.toml"

    @property
    def version(self) -> str:
        match = re.search(r'^(?:__version__|version)\s*=\s*"([^"]+)"', self.version_file.read_text(), re.MULTILINE)
        assert match, f"no version in {self.version_file}"
        return match.group(1)

    def set_version(self, version: str) -> None:
        text = self.version_file.read_text()
        self.version_file.write_text(re.sub(r'^((?:__version__|version)\s*=\s*")[^"]+(")', rf"\g<1>{version}\g<2>",
                                            text, count=1, flags=re.MULTILINE))

    @property
    def dependencies(self) -> list[str]:
        data = tomllib.loads((self.path / "pyproject.toml").read_text())
        return list(data["project"].get("dependencies", []))

    @property
    def tag_prefix(self) -> str:
        return f"{self.dist}-v"


def all_packages() -> list[Package]:
    return [Package(p.parent.name, p.parent) for p in sorted((ROOT / "packages").glob("*/pyproject.toml"))]


def package(dist: str) -> Package:
    for p in all_packages():
        if p.dist == dist:
            return p
    raise SystemExit(f"unknown package {dist!r}; choose from {[p.dist for p in all_packages()]}")


def release_tags(pkg: Package, repo: Path = ROOT) -> list[str]:
    """The package's release tags, oldest first by version."""
    out = subprocess.run(["git", "-C", str(repo), "tag", "-l", f"{pkg.tag_prefix}*"], capture_output=True,
                         text=True, check=True).stdout.split()
    return sorted(out, key=lambda t: version_tuple(t[len(pkg.tag_prefix):]))
