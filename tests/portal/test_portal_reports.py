"""A run's whole report rendered once per version of its report.md, in a process of its own,
and kept on disk: the kept HTML is what a later request reads, a report drawn anew is
rendered anew, and asking twice at once renders once."""

from __future__ import annotations

import os
from pathlib import Path

from nestbed.portal import reports


def table(rows: int, end: str) -> str:
    body = "".join(f"| l{i} | {i} |\n" for i in range(rows))
    return f"# run\n\n| link | bytes |\n|---|---:|\n{body}\n{end}\n"


def test_the_whole_report_is_rendered_once_and_kept_until_report_md_changes(
    tmp_path: Path,
) -> None:
    report, cache = tmp_path / "run" / "report.md", tmp_path / "kept"
    report.parent.mkdir()
    report.write_text(table(300, "THE END"))
    first = reports.start(cache, report)
    assert reports.start(cache, report) is first  # under way: the same rendering
    html = reports.whole(cache, report)
    assert html == reports.markdown(report.read_text())  # as rendered in this process
    assert "<td>l299</td>" in html and "<p>THE END</p>" in html
    [kept] = cache.glob("*.html")
    assert kept == first.result()
    kept.write_text("<p>kept</p>")  # what is read next is the kept file, not a rendering
    assert reports.whole(cache, report) == "<p>kept</p>"

    report.write_text(table(300, "DRAWN AGAIN"))
    os.utime(report, ns=(1, 1))  # a new version even where the clock is coarse
    assert "<p>DRAWN AGAIN</p>" in reports.whole(cache, report)
    assert len(list(cache.glob("*.html"))) == 2


TRICKY = """\
# run 1

- a list | with a pipe
- `code | in it`

| plain | right | centre | left |
|---|---:|:---:|:--|
| l1 | 10 | a b  c | x→y 2 Mb/s |
|  | 0 B | (1.5%) | n0, n1 |

| marked | cell |
|---|---|
| *em* | <b>raw</b> |
| a & b | "quoted" |

text before a table with no blank line
| a | b |
|---|---|
| 1 | 2 |

```
| in | a fence |
|---|---|
| 1 | 2 |
```

| uneven | row |
|---|---|
| 1 | 2 | 3 |

| head only | x |
|---|---|

> | quoted | table |
> |---|---|
> | 1 | 2 |
| last | table |
|-|-|
| 1 | 2 |
"""


def test_reports_render_as_markdown_it_renders_them() -> None:
    from markdown_it import MarkdownIt

    render = MarkdownIt("commonmark", {"html": False}).enable("table").render
    rows = "".join(f"| l{i} | n{i // 4} | egress | {i} | {i * 1500} B | 0 |\n" for i in range(400))
    report = "# r\n\n## Links\n\n| Link | Node | Direction | Packets | Bytes | Drops |\n"
    report += f"|---|---|---|---:|---:|---:|\n{rows}\n## Plots\n\n![links](plots/links.png)\n"
    assert reports._table(report.splitlines(), 4) is not None  # written here, not by markdown-it
    for text in (TRICKY, report, table(5, "END"), report.replace("\n", "\r\n"), "", "| a |\n"):
        assert reports.markdown(text) == render(text), text[:80]
    referenced = TRICKY + "\n[x]\n\n[x]: http://example.com\n"  # definitions: all markdown-it
    assert reports.markdown(referenced) == render(referenced)
