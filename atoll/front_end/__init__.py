"""A front-end process: HTTP routes, gRPC service, endpoints, admission, lanes, limits, slots, media."""
