"""Whole-system runs: chaos with killed workers and servers, a cluster failover under load,
the migration recipe as written, and fuzzing of every input door and HTTP surface."""
