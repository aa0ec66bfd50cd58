"""Grafana dashboards as code (grafanalib 0.7.1), generated into `dashboards/*.json`."""
