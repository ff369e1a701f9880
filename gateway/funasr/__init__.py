"""FunASR's WebSocket protocol, sans I/O: a session's config, its hotwords, the parser that
turns frames into events, and the result frames FunASR's clients read. The session that
serves it is ``gateway.session``; both dialects end there."""
