"""The job queue (platform_common.jobs.queue): producer, in-process and process workers,
completions, dead letters and the state vocabulary, on a single node and on a cluster."""
