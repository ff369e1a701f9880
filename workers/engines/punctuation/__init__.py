"""FunASR's CT-Transformer punctuation, run inside the offline engines."""
