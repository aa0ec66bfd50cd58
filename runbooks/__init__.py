"""Runbook pages rendered with jinja2; the generated markdown ships as package data."""
