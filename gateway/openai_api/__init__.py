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
``prompt``                 OpenAI's free-text prompt and keywords as hotwords, never
                           refused (sans I/O)
``realtime.events``        the Realtime API's client events, parsed and bounded (sans I/O)
``realtime.config``        a realtime session's configuration and its updates, validated
                           (sans I/O)
``realtime.server_events`` the server events built from the configuration: the session,
                           errors, items (sans I/O)
``realtime.turns``         a realtime session's input audio buffer and turns (sans I/O)
``realtime.transcripts``   the session's results as transcription events (sans I/O)
``realtime.dialect``       ``/v1/realtime?intent=transcription``: the Realtime API
                           translated to and from FunASR's protocol, so that the session
                           behind it is the FunASR endpoint's own (``gateway.session.session``)
========================== ================================================================
"""
