"""ONNX models to kernel programs: the importer, lowering by op family and arena
planning, and the builder types (`graph.py`) the importer and the lowerings share."""
