"""What the app serves with once it has started: its settings, its pools, and what the
sessions and requests share (places, the audio budget, the transcription limit)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.limits.access import ClientSessions
from gateway.limits.admission import Admission
from gateway.limits.budget import AudioBudget
from gateway.limits.transcriptions import TranscriptionLimiter
from gateway.session.resumes import ResumableSessions
from gateway.settings import GatewaySettings
from workers.pool import WorkerPool


@dataclass(frozen=True, slots=True)
class Serving:
    settings: GatewaySettings
    pool: WorkerPool
    admission: Admission
    clients: ClientSessions
    transcriptions: TranscriptionLimiter
    offline_pool: WorkerPool | None  # ASR_OFFLINE_MODEL's, else None: `pool` decodes all
    vad_pool: WorkerPool | None  # ASR_VAD_MODEL's, else None: the energy endpointer
    budget: AudioBudget  # the audio all sessions hold in this process
    resumes: ResumableSessions  # the sessions a resume can reach (gateway.session.resumes)

    @property
    def whole_utterance_pool(self) -> WorkerPool:
        """Where the WebSocket `offline` mode, 2pass sentences and /v1/transcribe decode."""
        return self.offline_pool or self.pool

    @property
    def pools(self) -> list[WorkerPool]:
        return [pool for pool in (self.pool, self.offline_pool, self.vad_pool) if pool is not None]
