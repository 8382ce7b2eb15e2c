"""Markdown tables for reports: one writer, so every cell is escaped the same way (a ``|`` in
a node's program output or a reason would otherwise split a row)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

ALIGN = {"left": "---", "right": "---:", "center": ":---:"}


def cell(value: object) -> str:
    """One cell: ``|`` escaped, line breaks folded into spaces."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    align: Sequence[str] | None = None,
) -> list[str]:
    """The lines of a table: a header row, its rule (``align``: left, right or center per
    column; left by default) and one line per row."""
    aligns = align or ["left"] * len(header)
    if len(aligns) != len(header):
        raise ValueError(f"{len(aligns)} alignments for {len(header)} columns")
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join(ALIGN[a] for a in aligns) + "|"]  # fmt: skip
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row of {len(row)} cells in a table of {len(header)} columns")
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return lines
