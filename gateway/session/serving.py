"""What the app serves with once it has started: its settings, the models with their pools,
and what the sessions and requests share (places, the audio budget, the transcription
limit, the server's known speakers)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass

from gateway.funasr.corrections import Rule
from gateway.funasr.known_speakers import KnownSpeaker
from gateway.limits.access import ClientSessions
from gateway.limits.admission import Admission
from gateway.limits.budget import AudioBudget
from gateway.limits.model_places import ModelPlaces
from gateway.limits.transcriptions import TranscriptionLimiter
from gateway.models.table import OPENAI_MODELS, model_id
from gateway.session.resume.resumes import ResumableSessions
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.errors import UnknownModelError
from workers.pool import WorkerPool


@dataclass(frozen=True, slots=True)
class ServedModel:
    """One model a session may choose: its pools (a companion may be another model's
    too) and its own places."""

    name: str
    pool: WorkerPool  # the streaming model's
    # Its companions by role: the offline model (else ``pool`` decodes all), the FSMN-VAD
    # (else the energy endpointer ends 2pass sentences), CAM++ (else no speaker labels).
    companions: Mapping[Role, WorkerPool]
    places: ModelPlaces

    def companion(self, role: Role) -> WorkerPool | None:
        return self.companions.get(role)

    def take_places(self, admission: Admission) -> ExitStack:
        """A session's places on this model: one of its own (``max_sessions``), and as many
        more of the gateway's as its streaming engine's session costs beyond the one the
        session holds already (``EngineCapabilities.session_places``); ``OverCapacityError``
        (1013) holding none when either is full. Leaving the stack gives them back."""
        with ExitStack() as taking:
            taking.enter_context(self.places.take())
            taking.enter_context(admission.admit_more(self.pool.session_places - 1))
            return taking.pop_all()

    @property
    def whole_utterance_pool(self) -> WorkerPool:
        """Where the WebSocket `offline` mode, 2pass sentences and /v1/transcribe decode."""
        return self.companions.get(Role.OFFLINE) or self.pool

    @property
    def pools(self) -> list[WorkerPool]:
        return [self.pool, *self.companions.values()]

    @property
    def ready(self) -> bool:
        return all(pool.ready for pool in self.pools)


@dataclass(frozen=True, slots=True)
class Serving:
    settings: GatewaySettings
    models: Mapping[str, ServedModel]  # by name, the default first
    admission: Admission  # the gateway-wide places (ASR_MAX_SESSIONS)
    clients: ClientSessions
    transcriptions: TranscriptionLimiter
    budget: AudioBudget  # the audio all sessions hold in this process
    resumes: ResumableSessions  # the sessions a resume can reach (gateway.session.resume.resumes)
    # The server's text corrections of every result (ASR_HOTWORD_RULES, read at start).
    hotword_rules: tuple[Rule, ...] = ()
    # The server's known speakers (ASR_SPEAKERS, read at start): they name the speakers of
    # an offline utterance with spk, and of OpenAI's diarized_json.
    known_speakers: tuple[KnownSpeaker, ...] = ()

    def model(self, name: str | None) -> ServedModel:
        """The model ``name`` names (None: the default), or ``UnknownModelError``."""
        if name is None:
            return self.default
        model = self.models.get(name)
        if model is None:
            raise UnknownModelError(
                f"model {name[:64]!r} is not served here; models: {', '.join(self.models)}"
            )
        return model

    def model_for_request(self, name: str) -> ServedModel:
        """A file request's model: a served one by its name; OpenAI's own names and the
        other ids of ``model_ids`` mean the default; else ``UnknownModelError``."""
        if name in self.models:
            return self.models[name]
        if name in OPENAI_MODELS or name in self.model_ids:
            return self.default
        raise UnknownModelError(
            f"model {name[:64]!r} is not served here; models: {', '.join(self.model_ids)}"
        )

    @property
    def model_ids(self) -> list[str]:
        """The models a request may name, the default first. From a models file, the
        served models' names; else the one model's by its whole-file decoder's model first,
        then the streaming pool's, as their ``ASR_*MODEL`` values."""
        if self.settings.model_table.from_file:
            return list(self.models)
        default = self.default
        pools = [default.whole_utterance_pool, default.pool]
        return list(dict.fromkeys(model_id(pool.settings.model) for pool in pools))

    @property
    def default(self) -> ServedModel:
        return self.models[self.settings.model_table.default]

    @property
    def pools(self) -> list[WorkerPool]:
        """Every pool once (a shared companion once)."""
        return list(dict.fromkeys(pool for model in self.models.values() for pool in model.pools))
