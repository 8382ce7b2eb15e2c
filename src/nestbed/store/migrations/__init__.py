"""Alembic migrations of the experiment store (run by ``nestbed.store.migrate``)."""
