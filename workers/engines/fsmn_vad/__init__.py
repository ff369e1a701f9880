"""FunASR's FSMN-VAD: under PyTorch, and under ONNX Runtime with funasr's state machine."""
