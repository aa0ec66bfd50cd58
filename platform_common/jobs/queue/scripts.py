"""The queue's Lua scripts, one per atomic operation (`lua/queue_*.lua`)."""

from __future__ import annotations

from ..redis.script import Script

__all__ = ["QueueScripts"]


class QueueScripts:
    """Every queue script by the operation it performs."""

    enqueue = Script.named("queue_enqueue")
    claim = Script.named("queue_claim")
    complete = Script.named("queue_complete")
    fail = Script.named("queue_fail")
    renew = Script.named("queue_renew")
    reap_scan = Script.named("queue_reap_scan")
    promote = Script.named("queue_promote")
    expire = Script.named("queue_expire")
    expire_queued = Script.named("queue_expire_queued")
    expire_tail = Script.named("queue_expire_tail")
    heartbeat = Script.named("queue_heartbeat")
    history = Script.named("queue_history")
    dead_requeue = Script.named("queue_dead_requeue")
    dead_purge = Script.named("queue_dead_purge")
    kept_prune = Script.named("queue_kept_prune")
    pause = Script.named("queue_pause")
    progress = Script.named("queue_progress")
    limits = Script.named("queue_limits")
    cancel = Script.named("queue_cancel")
    session_scan = Script.named("queue_session_scan")
