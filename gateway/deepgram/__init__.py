"""Deepgram's live API, ``/v1/listen``: the third dialect, as Deepgram's SDK and the voice-agent
frameworks' Deepgram plugins speak it (docs/deepgram.md).

``params`` reads the handshake's query; ``stream`` turns the client's audio and control
messages into a FunASR session's frames (sans I/O); ``results`` turns that session's result
frames into Deepgram's messages (sans I/O), with ``words`` for their word times; ``dialect``
is the ASGI translation that joins them to the session every dialect shares.
"""
