"""nestbed-probe's command line as nestbed-sim's probes read it: options with values, and
flags alone anywhere among them."""

from __future__ import annotations

from nestbed.linktest.simulated import _options


def test_a_flag_alone_does_not_shift_the_options_after_it():
    words = ["--count", "40", "--kernel-times", "--idle", "30.5", "--expect", "40"]
    assert _options(words) == {
        "--count": "40",
        "--kernel-times": "",
        "--idle": "30.5",
        "--expect": "40",
    }


def test_a_flag_at_the_end_is_kept():
    assert _options(["--bind", "10.0.0.2:40000", "--kernel-times"]) == {
        "--bind": "10.0.0.2:40000",
        "--kernel-times": "",
    }
