"""The Redis layer (platform_common.jobs.redis) against real servers: the pool policy, TLS,
ACL roles, credentials kept out of output, Sentinel and AOF durability."""
