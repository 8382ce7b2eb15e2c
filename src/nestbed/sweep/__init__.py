"""Parameter sweeps: an experiment run over a grid of parameter values with repetitions,
locally or on a Dask cluster, resumable, with one table and plots across points."""
