"""What a probe's attack is given: where the gateway is, its settings, how long it may run,
the tally it counts into, and the addresses it attacks from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import anyio

from bench.abuse.probes.attack import Tally
from bench.abuse.probes.server import ProbedGateway

# Linux routes all of 127/8 to the loopback: each probe's client is an address of its own,
# so that the per-address limits (ASR_MAX_SESSIONS_PER_CLIENT, ASR_MAX_PARKED_PER_CLIENT)
# see one attacker, or several, and never the victims (VICTIM_ADDRESS).
VICTIM_ADDRESS = "127.0.0.2"


@dataclass(frozen=True, slots=True)
class Context:
    gateway: ProbedGateway
    seconds: float  # how long a probe that is not ended by the server may keep at it
    tally: Tally
    victims: int = 0  # the victims' sessions, live beside the probe

    @property
    def env(self) -> Mapping[str, str]:
        return self.gateway.env

    def setting(self, name: str) -> float:
        return float(self.gateway.env[name])

    def setting_or(self, name: str, default: float) -> float:
        """A setting the profile leaves at its default."""
        return float(self.gateway.env.get(name, default))

    def url(self, path: str = "/") -> str:
        return f"ws://127.0.0.1:{self.gateway.port}{path}"

    @property
    def port(self) -> int:
        return self.gateway.port

    @staticmethod
    def source(index: int = 0) -> str:
        """The attacker's ``index``-th address (a client of its own for every limit)."""
        return f"127.0.{1 + index // 250}.{1 + index % 250}"

    async def released(self) -> None:
        """Until the gateway holds no session but the victims'."""
        await anyio.to_thread.run_sync(self.gateway.wait_released, 60.0, self.victims)

    async def metrics(self) -> dict[str, float]:
        return await anyio.to_thread.run_sync(self.gateway.metrics)
