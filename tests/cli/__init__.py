"""The operator command line, run as subprocesses."""
