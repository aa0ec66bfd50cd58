"""The Prometheus exporter (platform_common.jobs_exporter): snapshot parsing, metric
families, scrapes of real Redis data, outages, TLS and ACL, a cluster, a real Prometheus,
and the deployment files."""
