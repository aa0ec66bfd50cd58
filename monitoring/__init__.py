"""Monitoring as code: the base (config, site settings, queries, ids, alert spec) and renderers."""
