"""The suite, by area: store, queue, redis, exporter, monitoring, end_to_end, packaging."""
