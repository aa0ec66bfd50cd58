"""Generated runbook pages (markdown), shipped as package data for the exporter to serve."""
