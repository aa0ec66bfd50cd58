"""Prometheus exporter for platform_common.jobs queues: metrics computed on scrape."""
