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
