"""What one client can make the gateway hold or spend, what the bound is, and what it costs
everybody else: every endpoint's probes (``probes``), floods of tiny frames
(``frame_flood``), hostile realtime sessions (``realtime_hostile``), frames queued in uvicorn
behind a stopped reader (``ws_queue``), offline sessions holding hours of audio
(``held_audio``), large uploads (``upload_memory``), long files through ``/v1/transcribe``
(``long_audio``) and the memory of one whole-file decode (``decode_peak``).
"""
