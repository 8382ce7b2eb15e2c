"""Throughput-anomaly analysis of captures (the virtualized-testbed paper): per TCP transfer,
throughput against the ideal W·p/(P·R), RTT, loss, sender packet spacing and a verdict with
its evidence; see docs/analyze.md.

    from nestbed.analysis import analyze
    summary = analyze([Path("h1.pcap")], Path("out"), cpu=Path("cpu.csv"))
"""

from nestbed.analysis.summary import analyze

__all__ = ["analyze"]
