"""The README's demo: `make demo` (or `python -m demo`)."""
