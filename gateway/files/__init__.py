"""The HTTP file path: ``POST /v1/transcribe`` (the endpoint), its request (an upload or a
URL, WAV decoding), the streaming multipart reader, the pinned URL fetch, its errors. OpenAI's
``/v1/audio/transcriptions`` (``gateway.openai_api``) goes through the same code."""
