"""The engines alone, no gateway: what a step costs, and how their text compares. The
streaming engine's raw ceiling (``raw_ceiling``) and ONNX against PyTorch in text
(``onnx_fidelity``). The one-off measurements of single engines and features (the 2pass
companions, hotwords, ITN, SenseVoice, speakers, the int8 roofline and formats) are in
BENCHMARKS.md, each with the commit that still holds its script.
"""
