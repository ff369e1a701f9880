"""Everything a GPU machine should measure, in one call: ``check.sh`` runs ``check``'s steps
(the wheels it lacks, from ``wheels``; the CUDA tests; the model and the ONNX engine's
fidelity on the device; the gateway's workers placed on it and real-time streams through
it, from ``gateway``; the raw ceiling), each writing its record (``records``) into one
Markdown table for BENCHMARKS.md.
"""
