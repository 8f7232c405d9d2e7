"""`instance_group` as Triton's model configuration states it ("Instance Groups" in
docs/user_guide/model_configuration.md of Triton's server repository; `ModelInstanceGroup` in
model_config.proto): each group's `count` execution instances of the model, of its `kind`
(KIND_GPU on every GPU, or on those `gpus` lists; KIND_CPU on the CPU; KIND_AUTO a GPU where there
is one, else the CPU). Read here; placed on the server's vGPUs by `atoll.supervisor.instance_placement`.
What Atoll cannot do is refused at load, by name."""

from __future__ import annotations

from dataclasses import dataclass

from atoll.repository import pbtxt

KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU")
# Triton: a KIND_CPU group without a count has 2 instances on the ONNX Runtime backend
CPU_DEFAULT_COUNT = 2
UNSUPPORTED = ("secondary_devices", "rate_limiter", "host_policy", "passive", "profile")


class InstanceGroupError(ValueError):
    pass


@dataclass(frozen=True)
class InstanceGroup:
    count: int
    kind: str  # one of KINDS
    gpus: tuple[int, ...] = ()  # KIND_GPU / KIND_AUTO: the GPUs it names (empty: every one)

    def config(self, index: int, model: str) -> dict:
        """As Triton's config endpoint answers it (its group names `<model>_<index>`)."""
        return {"name": f"{model}_{index}", "kind": self.kind, "count": self.count, "gpus": list(self.gpus)}


def read_instance_groups(value, model: str) -> tuple[InstanceGroup, ...]:
    """The config's `instance_group` entries; none when it has none (the server's own placement)."""
    groups = []
    for index, entry in enumerate(pbtxt.as_list(value)):
        where = f"{model}: instance_group {index}"
        if not isinstance(entry, dict):
            raise InstanceGroupError(f"{where} must be a message")
        for field in UNSUPPORTED:
            if entry.get(field) not in (None, False, "", [], {}):
                raise InstanceGroupError(f"{where}: '{field}' is not supported by Atoll")
        kind = entry.get("kind", "KIND_AUTO")
        if kind == "KIND_MODEL":
            raise InstanceGroupError(f"{where}: KIND_MODEL is not supported: Atoll places every instance on a "
                                     "vGPU (KIND_GPU, KIND_CPU or KIND_AUTO)")  # fmt: skip
        if kind not in KINDS:
            raise InstanceGroupError(f"{where}: unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
        count = entry.get("count", CPU_DEFAULT_COUNT if kind == "KIND_CPU" else 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InstanceGroupError(f"{where}: count must be a positive integer, got {count!r}")
        gpus = pbtxt.as_list(entry.get("gpus"))
        if any(not isinstance(g, int) or isinstance(g, bool) or g < 0 for g in gpus):
            raise InstanceGroupError(f"{where}: gpus must be non-negative integers, got {gpus!r}")
        if gpus and kind == "KIND_CPU":
            raise InstanceGroupError(f"{where}: a KIND_CPU group names no gpus")
        groups.append(InstanceGroup(count, kind, tuple(gpus)))
    return tuple(groups)
