"""The handshake's query, read as Deepgram reads it (gateway.deepgram.params)."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from gateway.deepgram.params import (
    MIN_ENDPOINTING_MS,
    ListenParams,
    ListenRequestError,
    parse_params,
)


def _params(query: str, models: tuple[str, ...] = ("zh", "en")) -> ListenParams:
    return parse_params(parse_qs(query, keep_blank_values=True), models)


def test_what_livekits_deepgram_plugin_sends_is_taken() -> None:
    params = _params(
        "model=nova-3&punctuate=true&smart_format=false&no_delay=true&interim_results=true"
        "&encoding=linear16&vad_events=true&sample_rate=16000&channels=1&endpointing=25"
        "&filler_words=true&profanity_filter=false&numerals=false&mip_opt_out=false"
        "&language=en-US&keyterm=LiveKit&keyterm=Deepgram+SDK&tag=agent"
    )
    assert params == ListenParams(
        model=None,  # Deepgram's model names mean the default
        language="en",
        encoding="linear16",
        encoding_given=True,
        sample_rate=16000,
        interim_results=True,
        endpointing_ms=MIN_ENDPOINTING_MS,  # 25 ms, taken up to the shortest we cut at
        utterance_end_ms=None,
        vad_events=True,
        punctuate=True,
        smart_format=False,
        diarize=False,
        hotwords=("LiveKit", "Deepgram", "SDK"),
    )


def test_our_model_names_choose_a_model_and_telephony_audio_defaults_to_8khz() -> None:
    params = _params("model=en&encoding=mulaw")
    assert (params.model, params.encoding, params.sample_rate) == ("en", "mulaw", 8000)
    assert _params("model=nova-2-phonecall").model is None


@pytest.mark.parametrize(
    ("query", "taken"),
    [
        ("endpointing=false", None),
        ("endpointing=true", MIN_ENDPOINTING_MS),
        ("endpointing=1200", 1200),
        ("", MIN_ENDPOINTING_MS),
    ],
)
def test_endpointing(query: str, taken: int | None) -> None:
    assert _params(query).endpointing_ms == taken


def test_keywords_lose_their_boosts_and_free_text_is_never_refused() -> None:
    long = "一" * 40
    params = _params(f"keywords=snuffleupagus:5&keywords=kansas&keyterm={long}&keyterm=ok")
    # keyterms first; the 40-character one is left out, not refused
    assert params.hotwords == ("ok", "snuffleupagus", "kansas")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("encoding=opus", "encoding='opus' is not served"),
        ("sample_rate=4000", "sample_rate='4000': an integer from 8000 to 48000"),
        ("sample_rate=abc", "sample_rate='abc'"),
        ("channels=2", "channels=2: one channel is served"),
        ("interim_results=yes", "interim_results='yes': true or false"),
        ("utterance_end_ms=1000", "utterance_end_ms needs interim_results=true"),
        ("interim_results=true&utterance_end_ms=500", "utterance_end_ms='500'"),
        ("endpointing=-5", "endpointing='-5'"),
        ("redact=pci", "redact is not served"),
        ("redact=true", "redact is not served"),
    ],
)
def test_what_deepgram_would_refuse_or_we_cannot_honour_is_refused(
    query: str, message: str
) -> None:
    with pytest.raises(ListenRequestError, match=message.replace("(", r"\(")):
        _params(query)


def test_a_parameter_nobody_knows_is_ignored() -> None:
    assert _params("colour=red&redact=false") == _params("")


def test_known_speaker_names_the_server_voices_a_stream_may_name() -> None:
    assert _params("diarize=true").known_speakers is None  # any of the server's set
    assert _params("known_speaker=alice&known_speaker=bob").known_speakers == ("alice", "bob")
    with pytest.raises(ListenRequestError, match="known_speaker"):
        _params("&".join(["known_speaker=x"] * 65))
