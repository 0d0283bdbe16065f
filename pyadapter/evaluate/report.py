"""What `nanlens eval` prints: a progress line per program and the results as a Markdown table."""

from __future__ import annotations

from pathlib import Path

from pyadapter.evaluate.scoring import Row, Summary


def _verdict(row: Row) -> str:
    if row.error and row.found is None:
        return "error"
    return "exact" if row.exact_line else "miss"


def _cause_verdict(row: Row) -> str:
    """``cause op``, ``cause unknown (marked divergence)``; "" when nothing was located and no cause is marked."""
    if row.cause is None:
        return f"cause - (marked {row.expected_cause})" if row.expected_cause else ""
    if row.cause_hit is False:
        return f"cause {row.cause} (marked {row.expected_cause})"
    return f"cause {row.cause}"


def progress_line(index: int, total: int, row: Row, base: Path) -> str:
    """``[3/25] zoo_log_of_zero: exact Log at zoo_log_of_zero.py:33, cause op (21.4 s)``"""
    head = f"[{index}/{total}] {row.program}: {_verdict(row)}"
    if row.found is not None:
        head += f" {row.op or '?'} at {row.found.show(base)}"
        if not row.exact_line and row.expected is not None:
            head += f" (marked {row.expected.show(base)})"
    cause = _cause_verdict(row)
    if cause:
        head += ", " + cause
    if row.error:
        head += f" - {row.error}"
    return head + f" ({row.seconds.get('total', 0.0):.1f} s)"


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(rows: list[Row], summary: Summary, base: Path) -> str:
    lines = [
        "| program | bug | marked (ORIGIN) | found | op | exact | cause marked | cause found | cause right "
        "| replay graph / eager | check_numerics op | run s | locate s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        found = row.found.show(base) if row.found else ("error: " + row.error if row.error else "-")
        if row.found and row.role and row.role != "origin":
            found += f" ({row.role})"
        replay = (
            "-"
            if row.method != "capture"
            else f"{_yes_no(row.reproduced.get('graph'))} / {_yes_no(row.reproduced.get('eager'))}"
        )
        cn = row.check_numerics_op or "-"
        if row.check_numerics_agree is not None:
            cn += " (same)" if row.check_numerics_agree else " (differs)"
        lines.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    row.program + (" (dump)" if row.method == "dump" else ""),
                    row.title,
                    row.expected.show(base) if row.expected else "-",
                    found,
                    row.op or "-",
                    "yes" if row.exact_line else "**no**",
                    row.expected_cause or "-",
                    row.cause or "-",
                    "-"
                    if row.cause_hit is None and not row.expected_cause
                    else ("yes" if row.cause_hit else "**no**"),
                    replay,
                    cn,
                    f"{row.seconds.get('run', 0.0):.1f}",
                    f"{row.seconds.get('locate', 0.0):.1f}",
                )
            )
            + " |"
        )
    lines.append("")
    lines.append(
        f"Exact line: {summary.exact_line}/{summary.programs} ({summary.exact_fraction:.0%}). "
        f"Replay reproduced (graph and eager): {summary.reproduced}/{summary.bundles} bundles "
        f"(graph {summary.reproduced_graph}, eager {summary.reproduced_eager}). "
        f"check_numerics names the same op type: {summary.check_numerics_agree}/{summary.check_numerics_reported}. "
        f"Errors: {summary.errors}."
    )
    if summary.cause_programs:
        lines.append("")
        lines.append(f"Cause: {summary.cause_hit}/{summary.cause_programs} ({summary.cause_fraction:.0%}).")
        lines.append("")
        lines.append("| cause marked | programs | cause right | line right | both |")
        lines.append("|---|---|---|---|---|")
        for kind, counts in summary.by_cause.items():
            lines.append(
                f"| {kind} | {counts['programs']} | {counts['cause_hit']} | {counts['exact_line']} "
                f"| {counts['both']} |"
            )
    return "\n".join(lines)
