"""Residency (PipeSwitch): a vGPU holds the weights of as many models as its budget allows; the rest
stay in host memory, READY, and are switched in on demand, layer group by layer group on a copy
stream while the first groups already run. Pure parts: `grouping` (PipeSwitch's grouping),
`policy` (who is evicted), `pool` (places in the one pre-allocated pool), `holdings` (the two
together); `layout` maps a model's programs onto the pool, `transfer` moves the bytes, `manager`
ties them together for one vGPU, `settings` is what a worker is told, `metrics` what it reports.
Details and figures: docs/residency.md."""
