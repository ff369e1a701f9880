"""FunASR's Paraformers: the streaming one (PyTorch, ONNX Runtime, OpenVINO) and the offline
one (PyTorch, ONNX Runtime; SeACo and BiCif under PyTorch)."""
