"""The self-contained HTML report: the findings as text, and the op graph and health timeline drawn by the
same web bundle the VS Code webviews use (``pyadapter/report_assets/pictures.js`` and ``.css``, built from
``extension/webview`` by ``npm run build``), everything inlined so the page needs no network when viewed.
"""

from __future__ import annotations

import html
import json
import os
from importlib import resources
from typing import Any

from pyadapter import findings_text as text
from pyadapter.findings import Findings

ASSET_FILES = ("pictures.js", "pictures.css")
# The page may run only its own inline script and style: nothing is fetched, even by accident.
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


class ReportAssetsMissing(RuntimeError):
    """The built web bundle is not in this install (``npm run build`` writes it)."""


def read_assets() -> dict[str, str]:
    out = {}
    folder = resources.files("pyadapter") / "report_assets"
    for name in ASSET_FILES:
        try:
            out[name] = (folder / name).read_text(encoding="utf-8")
        except (FileNotFoundError, OSError):
            raise ReportAssetsMissing(
                f"pyadapter/report_assets/{name} is missing from this install (run `npm run build` in a checkout)"
            ) from None
    return out


def _script_safe(code: str) -> str:
    """Inline JS must not end its <script> element early."""
    return code.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def _json_script(data: Any) -> str:
    # "<" escaped, so no string in the data can close the element or open a comment.
    return (
        json.dumps(data, allow_nan=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _findings_html(findings: Findings) -> str:
    """The findings as the CLI says them (``pyadapter.findings_text``), laid out as HTML."""
    parts = []
    origin = findings.origin
    if origin is None:
        unlocated = text.unlocated_text(findings)
        if unlocated is not None:
            parts.append(f'<p class="nl-verdict">{_e(unlocated)}.</p>')
        else:
            parts.append('<p class="nl-verdict nl-finite">No NaN or Inf was found.</p>')
    else:
        label = text.origin_label(origin).capitalize()
        parts.append('<div class="nl-origin">')
        parts.append(
            f'<p class="nl-verdict"><strong>{label}:</strong> <code>{_e(text.origin_place(origin))}</code></p>'
        )
        code_lines = text.origin_code_lines(findings)
        if code_lines:
            shown = "\n".join(f'<span class="nl-lineno">{n}</span> {_e(code)}' for n, code in code_lines)
            parts.append(f'<pre class="nl-code">{shown}</pre>')
        op = origin.op
        parts.append("<dl>")
        parts.append(f"<dt>op</dt><dd><code>{_e(text.op_text(op))}</code></dd>")
        if op.graph:
            parts.append(f"<dt>graph</dt><dd>{_e(op.graph)}</dd>")
        parts.append(f"<dt>output</dt><dd>{_e(text.health_text(origin.health))}</dd>")
        for item in text.shown_inputs(origin):
            parts.append(
                f"<dt>input</dt><dd><code>{_e(item.name)}</code>: {_e(text.health_text(item.health))}</dd>"
            )
        parts.append("</dl>")
        if origin.message:
            parts.append(f'<p class="nl-message">{_e(origin.message)}</p>')
        parts.append("</div>")
        spread = text.spread_of(findings)
        if spread:
            parts.append(f"<h3>{_e(text.spread_title(len(spread)).capitalize())}</h3><ul>")
            for f in spread:
                parts.append(
                    f"<li><code>{_e(f.file)}:{f.line}</code> {_e(f.op.name)} ({_e(f.op.type)}): "
                    f"{_e(text.health_text(f.health))}</li>"
                )
            parts.append("</ul>")
    bundle = findings.bundle or {}
    verdicts = bundle.get("verdicts") if isinstance(bundle, dict) else None
    if isinstance(verdicts, dict) and verdicts:
        parts.append("<h3>Replay of the captured step</h3><ul>")
        for verdict in verdicts.values():
            parts.append(f"<li>{_e(_verdict_text(verdict))}</li>")
        parts.append("</ul>")
    warnings = findings.extra.get("warnings")
    if isinstance(warnings, list) and warnings:
        parts.append('<h3>Warnings</h3><ul class="nl-warnings">')
        parts.extend(f"<li>{_e(w)}</li>" for w in warnings)
        parts.append("</ul>")
    return "\n".join(parts)


def _verdict_text(data: Any) -> str:
    try:
        return text.verdict_sentence(data)
    except (
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
    ):  # a hand-edited findings.json: show what it holds
        return json.dumps(data)


def render_report(findings: Findings, pictures: dict[str, Any], assets: dict[str, str] | None = None) -> str:
    """The whole page as one string."""
    assets = assets if assets is not None else read_assets()
    source = pictures.get("source") or {}
    label = source.get("label") or os.path.basename(findings.source_path.rstrip(os.sep))
    kind = "capture bundle" if findings.source_kind == "bundle" else "dump"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="nanlens report">
<title>NaN Lens report: {_e(label)}</title>
<style>{assets["pictures.css"]}</style>
</head>
<body class="nl-report">
<header class="nl-header">
<h1>NaN Lens report</h1>
<p class="nl-source">{_e(kind)} <code>{_e(findings.source_path)}</code></p>
</header>
<section class="nl-findings" id="findings">
<h2>Findings</h2>
{_findings_html(findings)}
</section>
<section class="nl-section" id="op-graph-section">
<h2>Op graph around the origin</h2>
<div class="nl-view" data-nanlens-view="graph"></div>
</section>
<section class="nl-section" id="timeline-section">
<h2>Health timeline</h2>
<div class="nl-view" data-nanlens-view="timeline"></div>
</section>
<script type="application/json" id="nanlens-pictures">{_json_script(pictures)}</script>
<script>{_script_safe(assets["pictures.js"])}</script>
</body>
</html>
"""
