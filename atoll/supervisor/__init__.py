"""The supervisor process: model control, dispatcher (batcher + placement), front ends kept alive."""
