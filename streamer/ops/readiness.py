"""Whether this replica takes new sessions, in one place: `/readyz`, the 503 on /offer and WHIP, and the
load gauges all read it, so a load balancer's health check and the refusal a client gets never disagree.

`/healthz` stays liveness only (the process answers); readiness is "send me new sessions": false while
the shared models load, when every slot is taken, and from the moment a drain starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

State = Literal["ready", "starting", "full", "draining"]


@dataclass(frozen=True, slots=True)
class Readiness:
    """A snapshot: `state` and the figures behind it."""

    state: State
    sessions: int              # open now, plus those being set up
    capacity: int

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def load_ratio(self) -> float:
        """Sessions against capacity: what the autoscaler targets."""
        return self.sessions / self.capacity if self.capacity else 1.0

    def reason(self) -> str:
        """A sentence for the 503 body and the log."""
        if self.state == "draining":
            return "server is draining: it takes no new sessions"
        if self.state == "full":
            return f"server is full ({self.capacity} sessions)"
        if self.state == "starting":
            return "server is starting: models are loading"
        return "accepting sessions"

    def as_json(self) -> dict[str, Any]:
        return {"ready": self.ready, "state": self.state, "reason": self.reason(), "sessions": self.sessions,
                "capacity": self.capacity, "load_ratio": round(self.load_ratio, 4)}


def readiness(*, sessions: int, capacity: int, draining: bool, warm: bool = True) -> Readiness:
    """Draining wins over full (it will not pass), full over starting."""
    if draining:
        state: State = "draining"
    elif sessions >= capacity:
        state = "full"
    elif not warm:
        state = "starting"
    else:
        state = "ready"
    return Readiness(state, sessions, capacity)
