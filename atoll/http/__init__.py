"""The HTTP/1.1 edge: connections, bodies, messages, refusal pacing."""
