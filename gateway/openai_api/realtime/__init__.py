"""OpenAI's realtime transcription at ``/v1/realtime``: its events translated to and from
the FunASR session (``dialect``), sans-I/O parts beside it."""
