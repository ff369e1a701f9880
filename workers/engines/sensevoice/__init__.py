"""SenseVoiceSmall: whole utterances, tagged; under PyTorch and ONNX Runtime."""
