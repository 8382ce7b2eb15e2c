"""The experiment controller: one background process per active experiment (see daemon.py),
started and spoken to through client.py."""
