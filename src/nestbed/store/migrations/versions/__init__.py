"""One module per schema version of the experiment store, oldest first."""
