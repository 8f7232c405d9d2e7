"""Settings `atoll serve` gives its processes that the cluster endpoint shares, in a module of their
own so that the endpoint does not load the supervisor to read them."""

# glibc settings for the processes started here: decoded images (~1 MB) and batch buffers reuse
# heap pages instead of fresh mmaps and their page faults (measured: docs/data-plane.md).
HEAP_TUNING = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(128 << 20),
               "MALLOC_TOP_PAD_": str(16 << 20)}  # fmt: skip
# Connections to the metrics port: a few scrapers; idle ones past this make room as a front end's do.
METRICS_CONNECTIONS = 64
METRICS_BODY_BYTES = 64 * 1024  # a scrape sends none
