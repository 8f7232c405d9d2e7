"""Stable addresses for switched models: CUDA's virtual memory management, one pool of physical
chunks per vGPU, each model's own reserved address ranges.

The cupy executor captures programs as CUDA graphs, which bake in every buffer's device address.
So a model under residency keeps its addresses for life: at load it reserves a virtual range for
its weights and one per arena (`reserve`), and its graphs are captured on those. The pool is
physical memory made once, `count` chunks of the driver's granularity (`cuMemCreate`). Making a
model resident maps chunks of the pool under its ranges (`map`: the chunks of its place in
`holdings.Holdings`, which are free because the victims' were unmapped first); evicting unmaps them
(`unmap`). A switch therefore allocates nothing and no captured graph changes. While a model loads,
its ranges are backed by chunks of their own (`back`, released by `unback`): the load measures its
launches on real memory, and whether it then takes a place in the pool is decided once its whole
footprint (weights and arenas) is known.

`driver` is `vmm_cuda.CudaVmm` on GPUs, `vmm_host.HostVmm` (the same calls over host memory) on the
CUDA emulator, or a test's fake; its calls: granularity(), create(n) -> handle, release(handle),
reserve(n) -> address, free(address, n), map(address, n, handle), unmap(address, n),
set_access(address, n), array(address, n) -> a byte array over the range, close().
"""

from __future__ import annotations

from dataclasses import dataclass, field


def round_up(nbytes: int, unit: int) -> int:
    return -(-max(nbytes, 1) // unit) * unit


@dataclass
class _Ranges:
    spans: list[tuple[int, int]] = field(default_factory=list)  # (address, bytes), in reserve order
    mapped: bool = False  # pool chunks under every span
    backing: dict = field(default_factory=dict)  # address -> a load's own chunks (handles), until `unback`


class VirtualPool:
    def __init__(self, driver, nbytes: int):
        self.driver = driver
        self.chunk = driver.granularity()
        self.count = max(1, nbytes // self.chunk)
        self._handles = [driver.create(self.chunk) for _ in range(self.count)]
        self._owner: list[str | None] = [None] * self.count  # the model whose range a chunk backs
        self._models: dict[str, _Ranges] = {}

    @property
    def nbytes(self) -> int:
        return self.count * self.chunk

    def reserve(self, model: str, nbytes: int) -> tuple[int, object]:
        """A new range of `model` for `nbytes` (a whole number of chunks), backed by chunks of its
        own until `unback`: (its address, which never changes, and a byte array over it)."""
        size = round_up(nbytes, self.chunk)
        entry = self._models.setdefault(model, _Ranges())
        if entry.mapped:
            raise RuntimeError(f"{model}: a range reserved while the model holds pool chunks")
        address = self.driver.reserve(size)
        entry.spans.append((address, size))
        entry.backing[address] = handles = []
        for at in range(address, address + size, self.chunk):
            handles.append(self.driver.create(self.chunk))
            self.driver.map(at, self.chunk, handles[-1])
        self.driver.set_access(address, size)
        return address, self.driver.array(address, size)

    def drop(self, model: str, address: int) -> None:
        """A range of `model` no state uses any more (an arena a larger one superseded while the
        model loaded): it goes before it would count in the footprint."""
        entry = self._models[model]
        size = dict(entry.spans)[address]
        self._unback_span(address, size, entry.backing.pop(address))
        entry.spans.remove((address, size))
        self.driver.free(address, size)

    def footprint(self, model: str) -> int:
        """Bytes of pool `model` needs to be resident: all its ranges."""
        entry = self._models.get(model)
        return sum(size for _, size in entry.spans) if entry else 0

    def unback(self, model: str) -> None:
        """The load is over: its own chunks go (the model is READY until `map`)."""
        entry = self._models[model]
        for address, size in entry.spans:
            if address in entry.backing:
                self._unback_span(address, size, entry.backing.pop(address))

    def _unback_span(self, address: int, size: int, handles: list) -> None:
        for at in range(address, address + size, self.chunk):
            self.driver.unmap(at, self.chunk)
        for handle in handles:
            self.driver.release(handle)

    def map(self, model: str, at: int) -> None:
        """Map the pool's chunks from byte `at` (a place `Holdings` gave the model's footprint)
        under its ranges, in order."""
        entry = self._models[model]
        if entry.mapped or entry.backing:
            raise RuntimeError(f"{model}: mapped twice")
        if at % self.chunk:
            raise ValueError(f"{model}: pool place {at} is not on a chunk ({self.chunk} bytes)")
        first = at // self.chunk
        count = sum(size for _, size in entry.spans) // self.chunk
        taken = {self._owner[k] for k in range(first, first + count) if self._owner[k] is not None}
        if first + count > self.count or taken:
            raise RuntimeError(f"{model}: pool chunks {first}-{first + count - 1} are not free ({sorted(taken)})")
        k = first
        for address, size in entry.spans:
            for offset in range(0, size, self.chunk):
                self.driver.map(address + offset, self.chunk, self._handles[k])
                self._owner[k] = model
                k += 1
            self.driver.set_access(address, size)
        entry.mapped = True

    def unmap(self, model: str) -> None:
        """`model` leaves the pool: its chunks are free for the next model mapped there."""
        entry = self._models.get(model)
        if entry is None or not entry.mapped:
            return
        self._unmap_spans(entry)
        self._owner = [None if owner == model else owner for owner in self._owner]
        entry.mapped = False

    def _unmap_spans(self, entry: _Ranges) -> None:
        """Chunk by chunk: CUDA unmaps only whole mappings, never several at once."""
        for address, size in entry.spans:
            for at in range(address, address + size, self.chunk):
                self.driver.unmap(at, self.chunk)

    def forget(self, model: str) -> None:
        """`model` is unloaded: its ranges go back to the driver."""
        self.unmap(model)
        if model in self._models:
            self.unback(model)
            for address, size in self._models.pop(model).spans:
                self.driver.free(address, size)

    def close(self) -> None:
        for model in list(self._models):
            self.forget(model)
        for handle in self._handles:
            self.driver.release(handle)
        self._handles = []
        self.driver.close()
