"""mkdocs hooks: pages generated from what is installed, so the docs cannot drift from the code.

``<!-- catalogue -->`` in a page is replaced by a table of every registered accelerator, strategy, precision,
checkpoint IO and cluster environment, read from the entry points at build time.
"""

from __future__ import annotations

from typing import Any


def _catalogue() -> str:
    from xtrain.core.registry import all_registries

    sections = []
    for registry in all_registries():
        rows = ["| name | what it is | package |", "|---|---|---|"]
        for name in registry.names():
            try:
                description = registry.describe(name).replace("|", "\\|")
            except Exception as err:  # noqa: BLE001 - show the problem instead of failing the build
                description = f"*could not be loaded: {type(err).__name__}*"
            rows.append(f"| `{name}` | {description} | `{registry.distribution_of(name)}` |")
        title = registry.group.split(".", 1)[1].replace("_", " ")
        sections.append(f"## {title.capitalize()}\n\nEntry-point group `{registry.group}`, passed as "
                        f"`{registry.argument}=`.\n\n" + "\n".join(rows))
    return "\n\n".join(sections)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if "<!-- catalogue -->" in markdown:
        markdown = markdown.replace("<!-- catalogue -->", _catalogue())
    return markdown
