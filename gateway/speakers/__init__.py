"""Speakers while streaming, sans I/O: the live tracker that labels each closed sentence and
revises the labels once at the end of the stream (``gateway.speakers.tracker``)."""
