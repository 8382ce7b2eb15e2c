"""The one-drop study end to end: ns-2 and Linux, the same segment dropped, both recoveries."""

from __future__ import annotations

import json

import pytest

from nestbed.studies import onedrop

pytestmark = pytest.mark.root


def test_both_stacks_lose_segment_14_once_and_recover_it_by_fast_retransmit(tmp_path):
    study = onedrop.run(tmp_path / "study")
    ns2, linux = study["stacks"]["ns-2"], study["stacks"]["Linux"]
    assert ns2["chosen"]["seq"] == 14 and ns2["unit"] == "segment"
    assert len(ns2["drops"]) == 1  # ns-2 loses nothing else
    # Linux counts bytes: segment 14 starts after 13 full segments.
    mss = 1448
    assert linux["chosen"]["seq"] == 13 * mss and linux["unit"] == "byte"
    for stack in (ns2, linux):
        assert stack["chosen"]["recovery"] == "fast retransmit"
        assert stack["chosen"]["duplicate_acks"] >= 3
    assert study["both_fast_retransmit"]
    saved = json.loads((tmp_path / "study" / "study.json").read_text())
    assert saved["stacks"]["Linux"]["chosen"] == linux["chosen"]
    report = (tmp_path / "study" / "report.md").read_text()
    assert "Both stacks recover the chosen segment" in report
    assert (tmp_path / "study" / "compare" / "plots" / "tcp-ftp.png").is_file()
