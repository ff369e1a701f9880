"""Model tooling: resolving a model setting to a directory (``resolve``), the ONNX export
(``python -m workers.models.export``) and random-weight synthetic models
(``python -m workers.models.synthetic``)."""
