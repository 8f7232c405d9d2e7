"""Model control in its three modes, over a repository on disk and stand-ins for the supervisor's
add/remove (the real ones run in test_triton_protocol.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil

import pytest
from onnx import TensorProto
from tests.atoll.user_models import signature

from atoll.kserve.errors import ApiError, ErrorCode
from atoll.supervisor.model_control import ModelControl, ModelsFailed, check_model_name
from atoll.wire.model_control import IndexModels, LoadModel, UnloadModel

CONFIG = """name: "{name}"
max_batch_size: 4
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 2 ] }} ]
"""

GRAPH = signature({"x": (TensorProto.FLOAT, ["N", 2])}, {"y": (TensorProto.FLOAT, ["N", 2])}).SerializeToString()


def write(root, name, version="1", config_name=None):
    (root / name / version).mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(CONFIG.format(name=config_name or name))
    (root / name / version / "model.onnx").write_bytes(GRAPH)


class Supervisor:
    def __init__(self):
        self.log = []
        self.specs = []  # every spec added

    async def add(self, spec):
        self.log.append(("add", spec.name, spec.version))
        self.specs.append(spec)

    async def remove(self, name):
        self.log.append(("remove", name))  # a served version: "<model>/<version>"


def control(root, mode, poll_s=0.05):
    supervisor = Supervisor()
    return ModelControl(root, mode, poll_s, supervisor.add, supervisor.remove), supervisor.log


def test_explicit_mode_loads_on_request(tmp_path):
    for name in ("a", "b"):
        write(tmp_path, name)

    async def go():
        mc, log = control(tmp_path, "explicit")
        await mc.start(["a"])
        assert log == [("add", "a", "1")]
        assert await mc.handle(IndexModels()) == [{"name": "a", "version": "1", "state": "READY"}, {"name": "b"}]
        await mc.handle(LoadModel("a"))  # unchanged: nothing to do
        await mc.handle(LoadModel("b"))
        await mc.handle(UnloadModel("a"))
        await mc.handle(UnloadModel("a"))  # not served: nothing to do, no error
        assert log == [("add", "a", "1"), ("add", "b", "1"), ("remove", "a/1")]
        index = await mc.handle(IndexModels())
        assert index[0] == {"name": "a", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
        assert await mc.handle(IndexModels(ready=True)) == [{"name": "b", "version": "1", "state": "READY"}]
        write(tmp_path, "b", "2")  # a new version: served before the old one goes (version_policy latest 1)
        await mc.handle(LoadModel("b"))
        assert log[-2:] == [("add", "b", "2"), ("remove", "b/1")]
        with pytest.raises(ApiError) as missing:
            await mc.handle(LoadModel("nope"))
        assert missing.value.code == ErrorCode.INTERNAL  # Triton's status for an unknown model

    asyncio.run(go())


def test_explicit_star_loads_everything_and_none_mode_refuses_calls(tmp_path):
    for name in ("a", "b"):
        write(tmp_path, name)

    async def go():
        mc, log = control(tmp_path, "explicit")
        await mc.start(["*"])
        assert [entry[1] for entry in log] == ["a", "b"]
        mc, log = control(tmp_path, "none")
        await mc.start([])
        assert [entry[1] for entry in log] == ["a", "b"]
        for action in (LoadModel("a"), UnloadModel("a")):
            with pytest.raises(ApiError) as refused:
                await mc.handle(action)
            assert refused.value.code == ErrorCode.UNAVAILABLE

    asyncio.run(go())


def test_poll_mode_follows_the_repository(tmp_path):
    write(tmp_path, "a")

    async def go():
        mc, log = control(tmp_path, "poll")
        await mc.start([])
        poll = asyncio.create_task(mc.poll_forever())

        async def settles(expected):
            for _ in range(200):
                if log[-len(expected):] == expected:
                    return
                await asyncio.sleep(0.02)
            raise AssertionError(f"{log} does not end with {expected}")

        write(tmp_path, "b")
        await settles([("add", "b", "1")])
        shutil.rmtree(tmp_path / "a")
        await settles([("remove", "a/1")])
        write(tmp_path, "c")
        (tmp_path / "c" / "config.pbtxt").write_text("max_batch_size: {")  # a broken new model
        (tmp_path / "b" / "config.pbtxt").write_text("max_batch_size: {")  # a broken change
        for _ in range(200):
            index = {m["name"]: m for m in await mc.index()}
            if index.get("c", {}).get("state") == "UNAVAILABLE":
                break
            await asyncio.sleep(0.02)
        assert index["c"]["state"] == "UNAVAILABLE" and "config.pbtxt" in index["c"]["reason"]
        assert index["b"]["state"] == "READY" and ("remove", "b/1") not in log  # its served version goes on
        poll.cancel()
        with pytest.raises(ApiError) as refused:
            await mc.handle(LoadModel("b"))
        assert refused.value.code == ErrorCode.UNAVAILABLE

    asyncio.run(go())


@pytest.mark.parametrize("name", ["", ".", "..", "../a", "a/..", "/tmp/a", "a/b", "a\\b", "a\0b", "x" * 256,
                                  "\u00e9" * 128, "\ud800"])  # fmt: skip
def test_a_name_that_is_not_one_folder_of_the_repository_is_refused(name):
    with pytest.raises(ApiError) as refused:
        check_model_name(name)
    assert refused.value.code == ErrorCode.INVALID_ARG
    assert "model name" in refused.value.message and len(refused.value.message) < 200


@pytest.mark.parametrize("name", ["a", "mobilenet_v3_small", "a.b", "..a", "a..", " a", "x" * 255, "\u00e9" * 127])
def test_a_folder_name_passes(name):
    check_model_name(name)


def test_a_load_by_path_is_refused_and_touches_nothing(tmp_path):
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    write(repo, "a")
    write(outside, "evil")
    write(outside, "a")  # names a served model, from another folder
    calls = [str(outside / "evil"), "../outside/evil", str(outside / "a"), "../outside/a", "a/../a", "./a"]

    async def go():
        mc, log = control(repo, "explicit")
        await mc.start(["a"])
        served = await mc.handle(IndexModels())
        for name in calls:
            for action in (LoadModel(name), UnloadModel(name)):
                with pytest.raises(ApiError) as refused:
                    await mc.handle(action)
                assert refused.value.code == ErrorCode.INVALID_ARG, name
        assert log == [("add", "a", "1")]
        assert await mc.handle(IndexModels()) == served == [{"name": "a", "version": "1", "state": "READY"}]
        with pytest.raises(ApiError) as refused:
            await control(repo, "explicit")[0].start(["../outside/evil"])  # --load-model too
        assert refused.value.code == ErrorCode.INVALID_ARG

    asyncio.run(go())


def test_an_unknown_name_answers_as_triton_does(tmp_path):
    write(tmp_path, "a")

    async def go():
        mc, log = control(tmp_path, "explicit")
        for name in ("nope", "x" * 255):  # the longest name: no OSError from the file system
            with pytest.raises(ApiError) as missing:
                await mc.handle(LoadModel(name))
            assert missing.value.code == ErrorCode.INTERNAL  # Triton's status (tests/atoll/triton_calls.py)
            assert f"no model named '{name}' in the repository" in missing.value.message
        await mc.handle(UnloadModel("nope"))  # Triton: OK
        assert log == [] and await mc.handle(IndexModels()) == [{"name": "a"}]

    asyncio.run(go())


def test_a_config_naming_another_model_is_refused_before_anything_loads(tmp_path):
    write(tmp_path, "a")
    write(tmp_path, "b", config_name="a")

    async def go():
        mc, log = control(tmp_path, "explicit")
        await mc.start(["a"])
        with pytest.raises(ApiError) as refused:
            await mc.handle(LoadModel("b"))
        assert refused.value.code == ErrorCode.INVALID_ARG
        assert "name 'a' differs from folder 'b'" in refused.value.message
        assert log == [("add", "a", "1")]
        index = {entry["name"]: entry for entry in await mc.handle(IndexModels())}
        assert index["a"] == {"name": "a", "version": "1", "state": "READY"}
        assert index["b"]["state"] == "UNAVAILABLE"

    asyncio.run(go())


def test_a_failed_add_leaves_the_model_unserved_and_is_reported(tmp_path):
    write(tmp_path, "a")

    async def go():
        async def add(spec):
            raise RuntimeError("no room")

        mc = ModelControl(tmp_path, "explicit", 0.05, add, Supervisor().remove)
        with pytest.raises(ApiError) as failed:
            await mc.handle(LoadModel("a"))
        assert failed.value.code == ErrorCode.INVALID_ARG and failed.value.message == "failed to load 'a': no room"
        assert await mc.handle(IndexModels(ready=True)) == []
        await mc.handle(UnloadModel("a"))  # never served: nothing to remove

    asyncio.run(go())


def test_a_start_tries_every_model_and_exit_on_error_decides(tmp_path, caplog):
    for name in ("a", "b", "c"):
        write(tmp_path, name)
    (tmp_path / "b" / "config.pbtxt").write_text("max_batch_size: {")

    async def go(exit_on_error):
        supervisor = Supervisor()

        async def add(spec):
            if spec.name == "c":
                raise RuntimeError("cpu0: onnxruntime says\nInvalid model")
            await supervisor.add(spec)

        mc = ModelControl(tmp_path, "none", 0.05, add, supervisor.remove)
        try:
            return await mc.start([], exit_on_error), supervisor.log, await mc.index()
        except ModelsFailed as exc:
            return str(exc), supervisor.log, await mc.index()

    failed, log, index = asyncio.run(go(False))
    assert failed == ["b", "c"] and log == [("add", "a", "1")]
    states = {m["name"]: (m["state"], m.get("reason", "")) for m in index}
    assert states["a"] == ("READY", "")
    assert states["b"][0] == "UNAVAILABLE" and "config.pbtxt" in states["b"][1]
    assert states["c"] == ("UNAVAILABLE", "cpu0: onnxruntime says Invalid model")  # one line
    lines = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert lines[-1] == "failed to load 'c': cpu0: onnxruntime says Invalid model"
    assert not any(r.exc_info for r in caplog.records)
    message, log, _ = asyncio.run(go(True))
    assert message.startswith("failed to load b, c") and log == [("add", "a", "1")]  # the others still tried


def test_a_load_with_a_config_parameter_serves_that_config(tmp_path):
    write(tmp_path, "a")
    supervisor = Supervisor()
    specs = supervisor.specs

    async def go():
        mc = ModelControl(tmp_path, "explicit", 0.05, supervisor.add, supervisor.remove)
        await mc.handle(LoadModel("a"))
        await mc.handle(LoadModel("a", {"config": json.dumps({"max_batch_size": 2})}))
        await mc.handle(LoadModel("a", {"config": json.dumps({"max_batch_size": 2})}))  # the same: nothing to do
        wrong = json.dumps({"max_batch_size": 2, "input": [{"name": "nope", "data_type": "TYPE_FP32", "dims": [2]}]})
        for bad, reason in (("{", "not valid JSON"), ("[1]", "must be a JSON object"),
                            (wrong, "input 'nope' is not in the graph")):
            with pytest.raises(ApiError) as refused:
                await mc.handle(LoadModel("a", {"config": bad}))
            assert refused.value.code == ErrorCode.INVALID_ARG
            assert refused.value.message.startswith("failed to load 'a': ") and reason in refused.value.message
        with pytest.raises(ApiError) as unknown:
            await mc.handle(LoadModel("nope", {"config": "{}"}))
        assert unknown.value.code == ErrorCode.INTERNAL and "failed to load 'nope'" in unknown.value.message
        with pytest.raises(ApiError, match="unknown load parameter"):
            await mc.handle(LoadModel("a", {"colour": "red"}))
        return supervisor.log, await mc.index()

    log, index = asyncio.run(go())
    assert [s.max_batch_size for s in specs] == [4, 2]
    assert log == [("add", "a", "1"), ("remove", "a/1"), ("add", "a", "1")]
    assert index == [{"name": "a", "version": "1", "state": "READY"}]  # the refused loads left it served


def test_a_load_with_files_serves_them_and_forgets_them_at_unload(tmp_path):
    repository = tmp_path / "repo"
    repository.mkdir()
    supervisor = Supervisor()
    specs = supervisor.specs

    async def go():
        mc = ModelControl(repository, "explicit", 0.05, supervisor.add, supervisor.remove)
        config = json.dumps({"max_batch_size": 3})
        for parameters, reason in (({"file:1/model.onnx": base64.b64encode(GRAPH).decode()}, "need the 'config'"),
                                   ({"config": config, "file:../x": ""}, "must be relative"),
                                   ({"config": config, "file:1/model.onnx": "not base64!"}, "is not base64")):  # fmt: skip
            with pytest.raises(ApiError, match=reason):
                await mc.handle(LoadModel("up", parameters))
        await mc.handle(LoadModel("up", {"config": config, "file:1/model.onnx": base64.b64encode(GRAPH).decode()}))
        folder = specs[-1].path.parent.parent
        assert folder.name == "up" and folder.parent != repository and (folder / "1" / "model.onnx").read_bytes() == GRAPH
        assert (await mc.index())[0] == {"name": "up", "version": "1", "state": "READY"}
        await mc.handle(LoadModel("up", {"config": config, "file:2/model.onnx": GRAPH}))  # bytes, as gRPC sends
        assert specs[-1].version == "2" and not folder.exists()  # the first upload went with its model
        second = specs[-1].path.parent.parent
        await mc.handle(UnloadModel("up"))
        assert not second.exists()
        return supervisor.log

    assert asyncio.run(go()) == [("add", "up", "1"), ("add", "up", "2"), ("remove", "up/1"), ("remove", "up/2")]
    assert [s.max_batch_size for s in specs] == [3, 3]


def test_versions_follow_the_policy_and_the_files_one_by_one(tmp_path):
    """Triton's model_configuration.md, "Version Policy": `all` serves every version, and "the
    addition or removal of version subdirectories ... can change which model version is used";
    a version removed or changed is unloaded alone, the others serve on."""
    for version in ("1", "2", "3"):
        write(tmp_path, "m", version)
    config = tmp_path / "m" / "config.pbtxt"
    config.write_text(config.read_text() + "version_policy: { all { } }\n")

    async def go():
        mc, log = control(tmp_path, "poll")
        await mc.start([])
        assert sorted(log) == [("add", "m", "1"), ("add", "m", "2"), ("add", "m", "3")]
        assert [(e["version"], e["state"]) for e in await mc.index()] == [("1", "READY"), ("2", "READY"), ("3", "READY")]
        log.clear()
        shutil.rmtree(tmp_path / "m" / "2")
        (tmp_path / "m" / "3" / "model.onnx").write_bytes(GRAPH)  # rewritten: a new signature
        poll = asyncio.create_task(mc.poll_forever())
        for _ in range(500):
            if ("remove", "m/2") in log and ("add", "m", "3") in log:
                break
            await asyncio.sleep(0.02)
        poll.cancel()
        assert log == [("remove", "m/3"), ("add", "m", "3"), ("remove", "m/2")]  # version 1 untouched
        index = [(e["version"], e["state"], e.get("reason")) for e in await mc.index()]
        assert index == [("1", "READY", None), ("2", "UNAVAILABLE", "unloaded"), ("3", "READY", None)]
        config.write_text(config.read_text().replace("all { }", "specific { versions: [ 9 ] }"))
        with pytest.raises(ApiError, match=r"serves none of the versions in the repository \(1, 3\)"):
            await mc._load("m")
        assert ("remove", "m/1") not in log  # a load that fails drops nothing

    asyncio.run(go())
