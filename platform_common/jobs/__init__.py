"""platform_common.jobs: the JobStore contract and the Redis job queue."""
