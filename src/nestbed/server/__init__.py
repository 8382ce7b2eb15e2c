"""The nestbed server: one process that owns the store and the machine of a shared testbed."""
