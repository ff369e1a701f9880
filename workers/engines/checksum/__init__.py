"""The model-free checksum engine: the samples and CRC-32 of the audio so far."""
