"""The engines alone, no gateway: what a step costs in CPU and memory, and how their text
compares. The streaming engine's raw ceiling (``raw_ceiling``), ONNX against PyTorch in
text (``onnx_fidelity``) and in cost (``offline_onnx``), the offline engine's batching
(``offline_batch``) and hotwords (``hotwords``), and the 2pass companions: FSMN-VAD
(``vad_step``), punctuation (``punc_step``), both beside an offline decode (``companions``).
"""
