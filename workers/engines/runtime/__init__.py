"""What the engines share of their runtimes: ONNX files and frontends, torch checkpoints,
funasr quieted, what a model directory says."""
