"""``parser.link_arguments(..., apply_on="instantiate")``: a value read from one built object (``data.num_classes``)
passed to another's constructor (``model.num_classes``), as LightningCLI does.

xtrain builds the module, data module and Trainer itself rather than through jsonargparse's class groups, which
refuse such links on plain class arguments; so the links are kept here, and :func:`build_in_order` builds each
source before the parts that read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xtrain.core.errors import ConfigError

__all__ = ["InstantiationLink", "build_in_order", "link_arguments"]

_PARTS = ("data", "model")


@dataclass(frozen=True)
class InstantiationLink:
    """``target`` (``"model.<arg>"``) gets ``compute_fn`` of the attributes ``sources`` name on built objects."""

    sources: tuple[str, ...]
    target: str
    compute_fn: Callable[..., Any] | None


def link_arguments(parser: Any, links: dict[str, InstantiationLink]) -> Callable[..., Any]:
    """A ``parser.link_arguments`` that keeps the links applied on instantiation in ``links`` and hands the others
    (applied when parsing) to jsonargparse."""
    original = parser.link_arguments

    def link(source: str | tuple[str, ...], target: str, compute_fn: Callable[..., Any] | None = None,
             apply_on: str = "parse", **kwargs: Any) -> None:
        if apply_on != "instantiate":
            original(source, target, compute_fn, apply_on=apply_on, **kwargs)
            return
        sources = tuple(_plain_form(s) for s in ((source,) if isinstance(source, str) else source))
        target = _plain_form(target)
        parts = {name.partition(".")[0] for name in (*sources, target)}
        if not parts <= set(_PARTS) or len({s.partition(".")[0] for s in sources}) != 1 or "." not in target:
            raise ConfigError("link_arguments", f"{source} -> {target}", "links applied on instantiation go from "
                              "the data module to the model or back.", choices=["data.<attr> -> model.<arg>",
                                                                                "model.<attr> -> data.<arg>"],
                              fix="link data.<attribute> to model.<argument>, or apply_on='parse'.")
        links[target] = InstantiationLink(sources, target, compute_fn)

    return link


def build_in_order(links: list[InstantiationLink], cfg: Any,
                   build: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
    """Build the parts in ``build`` (``"data"``, ``"model"``: each takes its config), sources first, setting each
    linked argument from the objects built before it."""
    first = {link.sources[0].partition(".")[0] for link in links}
    order = sorted(build, key=lambda part: part not in first)
    built: dict[str, Any] = {}
    for part in order:
        for link in (lk for lk in links if lk.target.startswith(f"{part}.")):
            values = [_read(built, source) for source in link.sources]
            value = link.compute_fn(*values) if link.compute_fn is not None else values[0]
            _set(cfg[part], link.target.partition(".")[2], value)
        built[part] = build[part](cfg[part])
    return built


def _read(built: dict[str, Any], source: str) -> Any:
    part, _, attribute = source.partition(".")
    if part not in built:
        raise ConfigError("link_arguments", source, f"reads the {part} object, which this run does not build.",
                          fix=f"configure --{part}, or drop the link.")
    value = built[part]
    for name in attribute.split("."):
        value = getattr(value, name)
    return value


def _plain_form(name: str) -> str:
    """``model.init_args.num_classes`` (the form LightningCLI asks for in subclass mode) as ``model.num_classes``."""
    part, _, rest = name.partition(".")
    return f"{part}.{rest.removeprefix('init_args.')}" if rest.startswith("init_args.") else name


def _set(cfg: Any, argument: str, value: Any) -> None:
    """Set ``argument`` in a part's config, whether given as its arguments or as ``class_path``/``init_args``."""
    if "class_path" in cfg:
        if cfg.get("init_args") is None:
            cfg["init_args"] = {} if isinstance(cfg, dict) else type(cfg)()  # a jsonargparse Namespace
        holder = cfg["init_args"]
    else:
        holder = cfg
    holder[argument] = value
