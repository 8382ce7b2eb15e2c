"""The ns-2 back end: an experiment file run in the ns-2 simulator into the results schema, and
the comparison of run folders (simulated or emulated) side by side."""

from nestbed.results.seqplot import SeqTrace, plot_sequence, read_tcp_table
from nestbed.simulate.compare import compare, format_table
from nestbed.simulate.simulation import simulate

__all__ = ["SeqTrace", "compare", "format_table", "plot_sequence", "read_tcp_table", "simulate"]
