"""`nestbed calibrate` on real namespaces, in miniature: a 2-node link untuned and tuned, and a
link with 5 % configured loss whose loss must land at B, between the interfaces."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from nestbed.studies.calibrate import Settings, plan_targets, run
from nestbed.studies.calibrate.stats import binomial_interval

pytestmark = pytest.mark.root


def _rows(folder: Path, name: str) -> list[dict[str, str]]:
    with (folder / name).open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_two_node_link_is_calibrated_untuned_and_tuned(tmp_path: Path):
    settings = Settings(
        sizes=(50, 1000), bursts=(200,), repetitions=2, gap_s=0.2, topologies=("link",)
    )
    outcome = run(settings, tmp_path, targets=plan_targets(settings), progress=lambda *_: None)

    bursts = _rows(tmp_path, "bursts.csv")
    assert len(bursts) == 2 * 2 * 2  # profiles × sizes × repetitions, one receiver
    for row in bursts:
        n = {k: int(row[k]) for k in ("attempted", "received", "a", "b", "c", "rcvbuf_errors")}
        assert n["attempted"] == 200
        # The link neither shapes nor loses: nothing goes missing between the interfaces (a
        # stray frame such as ARP may move one count).
        assert abs(n["b"]) <= 1, row
        # What C counts is what the kernel says it dropped at the socket (a stray frame such as
        # ARP may stand between them).
        assert abs(n["c"] - n["rcvbuf_errors"]) <= 2, row
        if row["profile"] == "tuned":
            # A 12 MB buffer holds a whole burst of 200 datagrams of at most 1000 B (about
            # 2.3 kB each in the kernel): nothing can overflow it.
            assert n["c"] == 0, row
    for profile in ("untuned", "tuned"):
        assert any(r["profile"] == profile and r["rtt_mean_us"] for r in bursts)
    assert (tmp_path / "report.md").is_file()
    report = (tmp_path / "report.md").read_text()
    for plot in ("loss-link-untuned.png", "heatmap-link-tuned.png", "delay-link.png"):
        assert (tmp_path / "plots" / plot).is_file()
        assert f"plots/{plot}" in report
    assert {k["profile"] for k in outcome.knees} == {"untuned", "tuned"}


def test_configured_loss_lands_at_b_not_at_a_or_c(tmp_path: Path):
    settings = Settings(
        sizes=(1000,), bursts=(500,), repetitions=4, gap_s=0.2, topologies=("loss",),
        profiles=("tuned",), loss=0.05,
    )  # fmt: skip
    run(settings, tmp_path, targets=plan_targets(settings), progress=lambda *_: None)
    rows = _rows(tmp_path, "bursts.csv")
    handled = sum(int(r["sender_interface"]) for r in rows)
    a, b, c = (sum(int(r[k]) for r in rows) for k in ("a", "b", "c"))
    low, high = binomial_interval(b, handled)
    print(
        f"B {b}/{handled} = {b / handled:.4f}, 99.9 % interval [{low:.4f}, {high:.4f}]; A {a}, C {c}"
    )
    assert low <= 0.05 <= high
    # A and C see no configured loss: at most a stray frame (ARP) in the counters.
    assert abs(a) <= 2 and abs(c) <= 2
    (check,) = _rows(tmp_path, "loss-check.csv")
    assert check["b_agrees"] == "True"
