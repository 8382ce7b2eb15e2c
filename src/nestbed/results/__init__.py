"""Results of runs: reading a run folder and turning it into a report with plots."""
