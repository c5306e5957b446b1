"""The table ``validate``/``test`` print with ``verbose=True``: one column per dataloader, one row per metric."""

from __future__ import annotations

from typing import Literal

__all__ = ["format_results", "print_results"]


def format_results(results: list[dict[str, float]], stage: Literal["validate", "test"]) -> str:
    """A plain-text table of the epoch metrics of each dataloader (empty when nothing was logged)."""
    names = sorted({name for metrics in results for name in metrics})
    if not names:
        return ""
    header = [f"{stage.capitalize()} metric"] + [f"DataLoader {i}" for i in range(len(results))]
    rows = [[name] + [f"{metrics[name]:.6g}" if name in metrics else "" for metrics in results] for name in names]
    widths = [max(len(row[col]) for row in [header, *rows]) for col in range(len(header))]
    line = "─" * (sum(widths) + 3 * (len(widths) - 1))

    def fmt(row: list[str]) -> str:
        return " │ ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()

    return "\n".join([line, fmt(header), line, *(fmt(row) for row in rows), line])


def print_results(results: list[dict[str, float]], stage: Literal["validate", "test"]) -> None:
    table = format_results(results, stage)
    if table:
        print(table)
