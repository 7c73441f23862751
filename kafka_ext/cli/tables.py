"""Kafka's ToolsUtils.prettyPrintTable, which several of its tools print with: every cell
padded to its column's widest entry (the header's included), then a tab."""

from __future__ import annotations

from collections.abc import Sequence


def pretty_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    return "".join("".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths, strict=True))
                   + "\n" for row in [list(headers), *rows])
