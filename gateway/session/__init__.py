"""The session both dialects use: how a connection becomes one (``entry``: the handshake's
checks, the places, a resume), its task group (``session``), its pool streams, each mode's
utterance logic (``utterance/``), the outbox, resumability, and what the app serves with
(``serving``)."""
