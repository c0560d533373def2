"""The style sheet every HTML page of the library carries inline (no external file)."""

__all__ = ["CSS"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;
color:#1b1f24}
table{border-collapse:collapse;font-size:14px}
th,td{padding:4px 10px;border-bottom:1px solid #d0d7de;text-align:right}
th:first-child,td:first-child{text-align:left;font-family:ui-monospace,monospace}
tr.total td{font-weight:600;border-top:2px solid #57606a}
tr.total.plain td{font-weight:400;border-top:1px solid #d0d7de}
caption{font-weight:600;font-size:16px;text-align:left;padding-bottom:8px}
ul.notes{color:#57606a}
figure.bars{margin:0 0 2rem 0;max-width:960px}
figcaption,h2{font-weight:600;font-size:16px;margin:0 0 8px 0}
svg+figcaption{font-weight:400;font-size:14px;color:#57606a;margin:4px 0 0 0}
.bar-row{display:flex;align-items:center;gap:8px;margin:4px 0}
.bar-label{width:9rem;font-family:ui-monospace,monospace;font-size:13px}
.bar-track{position:relative;flex:1;height:22px;background:#f6f8fa}
.bar{position:absolute;left:0}
.bar.actual{top:0;height:14px;background:#0969da}
.bar.ideal{top:14px;height:8px;background:#8c959f}
.budget{position:absolute;top:-3px;height:28px;border-left:2px solid #cf222e}
.bar-value{width:16rem;font-size:13px;color:#57606a}
.legend{font-size:13px;color:#57606a;margin-top:6px}
.swatch{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}
.swatch.actual{background:#0969da}.swatch.ideal{background:#8c959f}
.swatch.budget-sw{background:#cf222e;width:3px}
details.leaf{margin:6px 0;max-width:960px}
details.leaf summary{font-family:ui-monospace,monospace;cursor:pointer}
table.dims{margin:6px 0 6px 1rem}
table.grid{margin:6px 0 12px 1rem}
table.grid td{min-width:28px;height:22px;text-align:center;font-size:11px;
font-family:ui-monospace,monospace;border:1px solid #fff;padding:1px 4px;
white-space:nowrap}
table.grid th{font-size:11px;font-weight:400;color:#57606a;padding:1px 4px;
text-align:center;border:0}
table.grid caption{font-size:12px;font-weight:400;color:#57606a}
p.warn{color:#cf222e}
p.verdict{font-size:18px;font-weight:600;padding:8px 12px;border-radius:6px;
max-width:960px}
p.verdict.ok{background:#dafbe1;color:#116329}
p.verdict.bad{background:#ffebe9;color:#a40e26}
p.verdict.neutral{background:#f6f8fa;color:#24292f}
ul.problems{color:#a40e26}ul.warnings{color:#9a6700}
p.legend{font-size:13px;color:#57606a;max-width:960px}
details.more{margin:0 0 12px 1.5rem;cursor:pointer}
"""
"""The pages' CSS: tables, verdict boxes, the mesh page's bars and grids, and
each chart's figure (its caption, after the SVG, in grey; a heading before
it in bold)."""
