"""Resumable sessions: the tokens, the parked sessions a resume reaches, and one session's
resumability."""
