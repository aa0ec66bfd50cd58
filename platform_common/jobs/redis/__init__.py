"""The one Redis layer: URL settings, the client factory (single node, TLS, Sentinel,
Cluster), the pool policy and the Lua Script type, shared by store, queue and exporter."""
