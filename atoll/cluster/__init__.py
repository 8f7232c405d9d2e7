"""The multi-node layer on Ray: Atoll nodes placed on Ray nodes, one KServe v2 endpoint for them."""
