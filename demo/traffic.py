"""The demo producer: a steady mix of ordinary, slow, flaky, poison and invalid jobs."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from typing import Any

MIX = (("ok", 0.70), ("slow", 0.12), ("flaky", 0.12), ("poison", 0.03), ("invalid", 0.03))
TASKS = {
    "dining": ("Find 3 dinner reservations in Tokyo, Feb 13-17, party of 2", "RestaurantOption[]"),
    "flights": ("Find a morning flight NRT -> KIX on Feb 15, one adult", "FlightOption[]"),
}


def make_job(agent_type: str, rng: random.Random) -> dict[str, Any]:
    behaviour = rng.choices([name for name, _ in MIX], [weight for _, weight in MIX])[0]
    task, result_format = TASKS[agent_type]
    return {
        "job_id": uuid.uuid4().hex,
        "session_id": uuid.uuid4().hex,
        "orchestrator_id": "orch-demo",
        "agent_type": agent_type,
        "task": task,
        "constraints": {"demo": behaviour, "max_price_per_person": 200},
        "curated_shortlist": ["sukiyabashi-jiro", "den", "kyubey"],
        "result_format": result_format,
        "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "ttl_seconds": 120,
    }
