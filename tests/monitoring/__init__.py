"""Tests of the monitoring code: base, renderers, generated files, schemas, live checks."""
