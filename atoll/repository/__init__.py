"""The model repository: Triton layout, config.pbtxt reader, the demo repository."""
