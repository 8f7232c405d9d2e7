import dataclasses

import pytest
from batching import BATCHERS
from fpga_host import BACKEND_CHOICES
from gpu_runtime.executors import EXECUTOR_CHOICES
from gpu_runtime.vgpu.discovery import MODES
from scheduler.policies import POLICIES

from atoll.config import (BatchingConfig, ConfigError, PreprocessingConfig, SchedulerConfig, VGpuConfig,
                          load_config, parse_set_options, render_toml)


def test_defaults_cover_every_section():
    c = load_config()
    assert c.server.http_port == 8000 and c.server.host == "127.0.0.1"
    assert c.preprocessing.backend == "auto" and c.preprocessing.crop == 224
    assert c.batching.batcher == "preba"
    assert c.scheduler.policy == "reset"
    assert c.vgpus.mode == "auto"


def test_file_then_overrides(tmp_path):
    path = tmp_path / "atoll.toml"
    path.write_text('[server]\nhttp_port = 9000\n[batching]\nbatcher = "triton"\n'
                    "[preprocessing]\nfp16 = true\nmax_audio_seconds = 12\n")
    c = load_config(path, {"server.http_port": "9100"})
    assert c.server.http_port == 9100  # the flag wins over the file
    assert c.batching.batcher == "triton"
    assert c.preprocessing.fp16 is True
    assert c.preprocessing.max_audio_seconds == 12.0


@pytest.mark.parametrize("text, key", [
    ("[server]\nhttp_prot = 1\n", "server.http_prot"),
    ("[srever]\nhost = 'x'\n", "srever"),
    ("[server]\nhttp_port = 'eighty'\n", "server.http_port"),
    ("[server]\nhttp_port = -3\n", "server.http_port"),
    ("[server]\nhttp_port = 1.5\n", "server.http_port"),
    ("[batching]\nbatcher = 'fifo'\n", "batching.batcher"),
    ("[preprocessing]\nfp16 = 'maybe'\n", "preprocessing.fp16"),
    ("server = 3\n", "server"),
])
def test_bad_files_name_the_key(tmp_path, text, key):
    path = tmp_path / "atoll.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(path)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_set_options():
    assert parse_set_options(["vgpus.cpu_vgpus=3", "server.host = 0.0.0.0"]) == {
        "vgpus.cpu_vgpus": "3", "server.host": "0.0.0.0"}
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_set_options(["vgpus.cpu_vgpus"])
    with pytest.raises(ConfigError, match="section.key"):
        load_config(overrides={"cpu_vgpus": 1})


def test_rendered_defaults_round_trip(tmp_path):
    path = tmp_path / "atoll.toml"
    path.write_text(render_toml(load_config()))
    assert load_config(path) == load_config()


def test_choices_come_from_the_registries():
    choices = {(section, f.name): f.metadata["choices"] for section, cls in
               (("preprocessing", PreprocessingConfig), ("batching", BatchingConfig),
                ("scheduler", SchedulerConfig), ("vgpus", VGpuConfig))
               for f in dataclasses.fields(cls) if "choices" in f.metadata}
    assert choices[("preprocessing", "backend")] == BACKEND_CHOICES
    assert set(choices[("batching", "batcher")]) == set(BATCHERS)
    assert set(choices[("scheduler", "policy")]) == set(POLICIES)
    assert choices[("vgpus", "mode")] == MODES
    assert choices[("vgpus", "executor")] == EXECUTOR_CHOICES
    with pytest.raises(ConfigError, match="batching.batcher: must be one of preba, triton, static"):
        load_config(overrides={"batching.batcher": "fifo"})
