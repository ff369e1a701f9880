"""The OpenAI dialect: OpenAI's audio API on top of the gateway's pools, limits and metrics.

========================== ================================================================
module                     what
========================== ================================================================
``transcriptions``         ``POST /v1/audio/transcriptions`` (and ``stream=true``'s server-
                           sent events), ``GET /v1/models``
``formats``                a transcript as ``json``, ``text``, ``srt``, ``vtt``,
                           ``verbose_json`` (sans I/O)
``errors``                 OpenAI's error JSON and the status codes its SDK maps to its
                           exception classes
``realtime_events``        the Realtime API's transcription events, parsed and built
                           (sans I/O)
``realtime_turns``         a realtime session's input audio buffer and turns (sans I/O)
``realtime``               ``/v1/realtime?intent=transcription``: the Realtime API
                           translated to and from FunASR's protocol, so that the session
                           behind it is the FunASR endpoint's own (``gateway.session``)
========================== ================================================================
"""
