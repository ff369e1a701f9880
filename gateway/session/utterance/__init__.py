"""Each mode's utterance logic, sans I/O: protocol events in, actions out.

=================== ==========================================================
module              mode
=================== ==========================================================
``online``          ``online``: one streaming pass
``offline``         ``offline``: held whole, decoded at the end (in segments
                    when long)
``two_pass_energy`` ``2pass``, sentences ended by the energy endpointer
``two_pass_vad``    ``2pass``, sentences ended by the FSMN-VAD pool
=================== ==========================================================

(and ``online`` of a model whose streams are speech regions: the two ``two_pass``
modules without their offline pass)

``actions`` lists what an utterance may ask of the session; ``base`` and ``two_pass``
hold what the modes share. The session (``gateway.session.session``) only carries the actions out.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.funasr.config import SessionConfig
from gateway.funasr.known_speakers import Clip
from gateway.session.utterance.base import Utterance, UtteranceSettings
from gateway.session.utterance.offline import Offline
from gateway.session.utterance.online import Online
from gateway.session.utterance.two_pass_energy import TwoPassEnergy
from gateway.session.utterance.two_pass_vad import TwoPassVad
from shared.errors import ProtocolError

__all__ = ["Utterance", "UtteranceSettings", "check_served", "utterance_for"]


def check_served(config: SessionConfig, settings: UtteranceSettings) -> None:
    """A ``spk`` the session cannot serve is refused (``ProtocolError``): speakers are told
    apart in a whole utterance (``offline``) or in each 2pass sentence as it closes (a live
    tracker), by a model that has a speaker model. Its known speakers' clips (``spk_refs``)
    with it: only a speaker model embeds them; without ``spk`` they are not used."""
    if config.spk and config.mode == "online":
        raise ProtocolError("spk (speaker labels) is served in the offline and 2pass modes")
    if config.spk and not settings.speakers:
        raise ProtocolError("spk: the session's model has no speaker model (ASR_SPEAKER_MODEL)")


def utterance_for(
    config: SessionConfig,
    settings: UtteranceSettings,
    *,
    vad: bool,
    clips: Sequence[Clip] = (),
) -> Utterance:
    """The utterance ``config`` starts (refused first, ``check_served``); ``vad``: 2pass
    sentences end where the VAD pool says; ``clips``: its config's known speakers'
    references, decoded (``spk_refs``), which name an ``offline`` utterance's speakers."""
    check_served(config, settings)
    match config.mode:
        case "online" if settings.streaming_regions:
            # Each speech region its own streaming pass (streaming SenseVoice).
            if vad:
                return TwoPassVad(config, settings, offline_pass=False)
            return TwoPassEnergy(config, settings, offline_pass=False)
        case "online":
            return Online(config, settings)
        case "offline":
            return Offline(config, settings, clips)
        case "2pass":
            return TwoPassVad(config, settings) if vad else TwoPassEnergy(config, settings)
