"""Other streaming servers measured beside this gateway, on the same models with the same
probe (``bench.load.capacity``): ``sherpa_onnx``, sherpa-onnx's C++ WebSocket server."""
