"""ONNX exports of the models whose engines run ONNX (``python -m workers.models.export``)."""
