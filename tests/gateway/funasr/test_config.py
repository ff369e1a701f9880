"""A FunASR config's fields (``gateway.funasr.config``): defaults, each field's checks, and
what a frame mid-utterance may change."""

from __future__ import annotations

import base64
import json

import pytest

from gateway.funasr.config import SessionConfig, parse_config
from gateway.funasr.known_speakers import ReferenceClip
from gateway.funasr.parser import (
    ParserState,
    ProtocolParser,
)
from shared.errors import ProtocolError
from shared.messages import StreamOptions
from tests.helpers.wav import speech, wav_bytes


def streaming_parser(**fields: object) -> ProtocolParser:
    parser = ProtocolParser()
    parser.receive_text(json.dumps({"mode": "online", **fields}))
    return parser


# --- SessionConfig ---------------------------------------------------------------------


def test_defaults_are_funasrs() -> None:
    config = SessionConfig()
    assert config.mode == "2pass"
    assert config.chunk_size == (5, 10, 5)
    assert config.chunk_interval == 10
    assert (config.encoder_chunk_look_back, config.decoder_chunk_look_back) == (4, 0)
    assert (config.wav_name, config.wav_format, config.audio_fs) == ("microphone", "pcm", 16000)
    assert (config.hotwords, config.itn) == ((), True)


def test_chunk_bytes_is_the_middle_chunk_size_in_60ms_units_of_16bit_pcm() -> None:
    assert SessionConfig(chunk_size=(0, 10, 5)).chunk_bytes == 10 * 960 * 2
    assert SessionConfig(chunk_size=(5, 1, 0)).chunk_bytes == 1920


def test_stream_options_carry_chunking_look_backs_and_hotwords() -> None:
    config = SessionConfig(
        chunk_size=(2, 8, 3),
        encoder_chunk_look_back=7,
        decoder_chunk_look_back=1,
        hotwords=("阿里巴巴",),
    )
    assert config.stream_options() == StreamOptions(
        chunk_size=(2, 8, 3),
        encoder_chunk_look_back=7,
        decoder_chunk_look_back=1,
        hotwords=("阿里巴巴",),
        itn=True,  # FunASR's C++ server's default
    )
    assert not parse_config({"itn": False}).stream_options().itn


def test_parse_config_keeps_omitted_fields_of_the_base() -> None:
    base = SessionConfig(mode="offline", wav_name="a.wav")
    assert parse_config({"wav_name": "b.wav"}, base) == SessionConfig(
        mode="offline", wav_name="b.wav"
    )


# --- Validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"mode": "streaming"}, "mode"),
        ({"mode": 1}, "mode"),
        ({"chunk_size": [5, 10]}, "chunk_size"),
        ({"chunk_size": [5, 10, 5, 5]}, "chunk_size"),
        ({"chunk_size": [5, 10.0, 5]}, "chunk_size"),
        ({"chunk_size": [5, True, 5]}, "chunk_size"),
        ({"chunk_size": [5, 101, 5]}, "chunk_size"),
        ({"chunk_size": [-1, 10, 5]}, "chunk_size"),
        ({"chunk_size": [5, 0, 5]}, "chunk_size"),
        ({"chunk_size": "5,10"}, "chunk_size"),
        ({"chunk_size": "5,ten,5"}, "chunk_size"),
        ({"chunk_size": "5,+10,5"}, "chunk_size"),
        ({"chunk_size": "5,1_0,5"}, "chunk_size"),
        ({"chunk_size": 10}, "chunk_size"),
        ({"chunk_interval": 0}, "chunk_interval"),
        ({"chunk_interval": 1001}, "chunk_interval"),
        ({"chunk_interval": "10"}, "chunk_interval"),
        ({"chunk_interval": True}, "chunk_interval"),
        ({"encoder_chunk_look_back": -1}, "encoder_chunk_look_back"),
        ({"encoder_chunk_look_back": 101}, "encoder_chunk_look_back"),
        ({"decoder_chunk_look_back": False}, "decoder_chunk_look_back"),
        ({"decoder_chunk_look_back": 1.5}, "decoder_chunk_look_back"),
        ({"wav_name": 7}, "wav_name"),
        ({"wav_name": "x" * 257}, "wav_name"),
        ({"wav_name": "\ud800"}, "wav_name"),
        ({"wav_format": "wav"}, "wav_format"),
        ({"wav_format": None}, "wav_format"),
        ({"audio_fs": 7999}, "audio_fs"),
        ({"audio_fs": 96000}, "audio_fs"),
        ({"audio_fs": 16000.0}, "audio_fs"),
        ({"hotwords": ["a", "b"]}, "hotwords"),
        ({"itn": 1}, "itn"),
        ({"itn": "true"}, "itn"),
        ({"svs_lang": "fr"}, "svs_lang"),
        ({"svs_lang": None}, "svs_lang"),
        ({"svs_itn": "false"}, "svs_itn"),
        ({"spk": "yes"}, "spk"),
        ({"is_speaking": "yes"}, "is_speaking"),
        ({"is_speaking": 1}, "is_speaking"),
        ({"mode": "online", "is_finished": 1}, "is_finished"),
        ({"mode": "online", "is_end": "true"}, "is_end"),
    ],
)
def test_bad_config_field_is_refused_by_name(fields: dict[str, object], field: str) -> None:
    parser = ProtocolParser()
    with pytest.raises(ProtocolError, match=field):
        parser.receive_text(json.dumps(fields))
    assert parser.state is ParserState.FAILED


@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000])
def test_rates_from_8_to_48_khz_are_accepted(rate: int) -> None:
    parser = streaming_parser(audio_fs=rate)
    assert parser.config is not None
    assert parser.config.audio_fs == rate


def test_other_rates_are_refused() -> None:
    with pytest.raises(ProtocolError, match=r"8000\.\.48000 Hz is accepted"):
        ProtocolParser().receive_text('{"audio_fs": 4000}')


def test_longest_wav_name_is_accepted() -> None:
    parser = streaming_parser(wav_name="é" * 256)
    assert parser.config is not None
    assert parser.config.wav_name == "é" * 256


def test_bounds_of_integer_fields_are_accepted() -> None:
    parser = streaming_parser(
        chunk_size=[0, 1, 100], chunk_interval=1000, encoder_chunk_look_back=0
    )
    assert parser.config is not None
    assert parser.config.chunk_size == (0, 1, 100)


def test_svs_fields_default_as_funasrs_cpp_server_and_reach_the_stream_options() -> None:
    """svs_lang "auto" and svs_itn true unless the config says otherwise, as FunASR's C++
    server defaults them; they become the offline stream's language and own ITN."""
    assert parse_config({}).stream_options().language == "auto"
    assert parse_config({}).stream_options().model_itn is True
    options = parse_config({"svs_lang": "yue", "svs_itn": False, "itn": True}).stream_options()
    assert (options.language, options.model_itn, options.itn) == ("yue", False, True)


def test_spk_is_off_unless_the_config_asks() -> None:
    assert parse_config({}).spk is False
    assert parse_config({"spk": True}).spk is True


def test_known_speakers_come_as_names_and_base64_clips_paired() -> None:
    wav = wav_bytes(speech(2.5, rate=8000), rate=8000)
    clip = base64.b64encode(wav).decode()
    config = parse_config(
        {"spk": True, "spk_names": ["alice", "bob"], "spk_refs": [clip, f"data:;base64,{clip}"]}
    )
    assert config.spk_names == ("alice", "bob")
    # Each with its length by its header: its cost is known before a sample is decoded.
    assert config.spk_refs == (ReferenceClip(wav, 2.5), ReferenceClip(wav, 2.5))
    assert parse_config({}, config).spk_refs == config.spk_refs  # kept by a later frame


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"spk_names": "alice", "spk_refs": ["QUJD"]}, "spk_names must be a list of strings"),
        ({"spk_names": ["alice"], "spk_refs": [1]}, "spk_refs must be a list of strings"),
        ({"spk_names": ["alice"]}, "pair up"),
        ({"spk_names": ["a", "a"], "spk_refs": ["QUJD", "QUJD"]}, "each name is given once"),
        ({"spk_names": ["alice"], "spk_refs": ["not base64!"]}, r"spk_refs\[0\]: .* base64"),
        ({"spk_names": list("abcde"), "spk_refs": ["QUJD"] * 5}, "at most 4 known speakers"),
        ({"spk_names": ["a"], "spk_refs": ["QUJD"]}, r"spk_refs\[0\]: the audio is not a WAV"),
        (
            {"spk_names": ["a"], "spk_refs": [b64(wav_bytes(speech(1.5)))]},
            r"spk_refs\[0\]: the clip lasts 1.50 s; a reference lasts 2 to 10 s",
        ),
        (
            {"spk_names": ["a"], "spk_refs": [b64(wav_bytes(speech(10.5, rate=8000), 8000))]},
            "a reference lasts 2 to 10 s",
        ),
    ],
)
def test_known_speakers_that_cannot_be_used_are_refused_by_name(
    fields: dict[str, object], why: str
) -> None:
    with pytest.raises(ProtocolError, match=why):
        parse_config({"mode": "offline", "spk": True, **fields})
