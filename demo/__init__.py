"""The README's first command: a local Redis, the exporter, workers and a producer."""
