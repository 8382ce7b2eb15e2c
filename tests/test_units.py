"""Units: every accepted form, every rejected form with its message, and exact printing."""

import pytest

from nestbed.units import (
    UnitError,
    format_bandwidth,
    format_delay,
    parse_bandwidth,
    parse_delay,
    parse_probability,
    parse_size,
    parse_time,
)

BANDWIDTHS = [
    ("100", 100),
    (100, 100),
    ("56b", 56),
    ("300bps", 300),
    ("56k", 56_000),
    ("56kb", 56_000),
    ("56kbps", 56_000),
    ("64K", 64_000),
    ("64Kb", 64_000),
    ("64Kbps", 64_000),
    ("1.544M", 1_544_000),
    ("10Mb", 10_000_000),
    ("45Mbps", 45_000_000),
    ("1G", 1_000_000_000),
    ("1Gb", 1_000_000_000),
    ("2.5Gbps", 2_500_000_000),
    ("0", 0),
]


@pytest.mark.parametrize(("text", "bps"), BANDWIDTHS)
def test_bandwidth_units(text, bps):
    assert parse_bandwidth(text) == bps


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "10MB",
            "bandwidth '10MB' has unknown unit 'MB'; write bits per second with b, kb, Mb or Gb (for example 10Mb); bytes (B) are not accepted",
        ),
        (
            "fast",
            "bandwidth 'fast' is not a valid bandwidth; write bits per second with b, kb, Mb or Gb (for example 10Mb); bytes (B) are not accepted",
        ),
        (
            "10mb",
            "bandwidth '10mb' has unknown unit 'mb'; write bits per second with b, kb, Mb or Gb (for example 10Mb); bytes (B) are not accepted",
        ),
    ],
)
def test_bandwidth_errors_name_the_value(text, message):
    with pytest.raises(UnitError) as info:
        parse_bandwidth(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("1.5", 1.5),
        ("2s", 2.0),
        ("20ms", 0.02),
        ("0.5ms", 0.0005),
        ("100us", 1e-4),
        ("250ns", 2.5e-7),
        ("1ms", 0.001),
        (0.3, 0.3),
    ],
)
def test_delay_units(text, seconds):
    assert parse_delay(text) == seconds


def test_delay_has_no_floor_and_rejects_negative_and_unknown_units():
    assert parse_delay("1us") == 1e-6  # Emulab's 2 ms floor does not apply
    with pytest.raises(UnitError, match="is negative"):
        parse_delay("-1ms")
    with pytest.raises(UnitError, match="unknown unit 'min'"):
        parse_delay("1min")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10.5", 10.5),
        ("90s", 90.0),
        ("1h20m3s", 4803.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        (7, 7.0),
    ],
)
def test_event_times(text, seconds):
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-1", "1x", "", "1h-2m"])
def test_bad_event_times(text):
    with pytest.raises(UnitError, match="time"):
        parse_time(text)


def test_probability_bounds():
    assert parse_probability("0.001") == 0.001
    assert parse_probability(1) == 1.0
    for bad in ("1.5", "-0.1", "5%"):
        with pytest.raises(UnitError, match="between 0 and 1"):
            parse_probability(bad)


def test_sizes():
    assert parse_size("512MB") == 512_000_000
    assert parse_size("1GiB") == 1 << 30
    assert parse_size(1500) == 1500
    with pytest.raises(UnitError, match="unknown unit 'Mb'"):
        parse_size("512Mb", "memory")


@pytest.mark.parametrize(
    "bps", [0, 1, 56_000, 1_544_000, 10_000_000, 44_736_000, 1_000_000_000, 123_456_789]
)
def test_bandwidth_prints_back_exactly(bps):
    assert parse_bandwidth(format_bandwidth(bps)) == bps


@pytest.mark.parametrize(
    "seconds", [0.0, 0.02, 0.3, 1e-6, 7e-9, 0.0123, 1.5, 2.0, 0.1 + 0.2, 1 / 3]
)
def test_delay_prints_back_exactly(seconds):
    assert parse_delay(format_delay(seconds)) == seconds


def test_delay_prints_readably():
    assert [format_delay(s) for s in (0.02, 2.0, 1e-6, 0.0)] == ["20ms", "2s", "1us", "0ms"]
