"""ServerConfig: flags over environment over defaults, loopback detection, clear errors for bad values."""

from __future__ import annotations

import pytest

from streamer.config import ServerConfig


def test_environment_then_overrides():
    env = {"LIVEFUSE_PORT": "9001", "LIVEFUSE_CODEC": "h264", "LIVEFUSE_ICE_SERVERS": "stun:a.example:3478, turn:b.example",
           "LIVEFUSE_MAX_SESSIONS": "3", "LIVEFUSE_IDLE_TIMEOUT_S": "2.5", "LIVEFUSE_HOST": ""}
    c = ServerConfig.from_env(env, max_sessions=5, host=None)
    assert (c.port, c.codec, c.max_sessions, c.idle_timeout_s, c.host) == (9001, "H264", 5, 2.5, "127.0.0.1")
    assert c.ice_servers == ("stun:a.example:3478", "turn:b.example")


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                            ("0.0.0.0", False), ("192.168.1.5", False), ("example.org", False)])
def test_loopback(host, loopback):
    assert ServerConfig(host=host).loopback is loopback


@pytest.mark.parametrize("kwargs, match", [({"codec": "AV1"}, "codec"), ({"port": 0}, "port"),
                                           ({"min_bitrate": 10, "max_bitrate": 5}, "bitrate"),
                                           ({"tls_cert": "c.pem"}, "TLS"), ({"max_sessions": 0}, "max_sessions")])
def test_bad_values_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ServerConfig(**kwargs)


def test_bad_environment_value_names_the_variable():
    with pytest.raises(ValueError, match="LIVEFUSE_PORT"):
        ServerConfig.from_env({"LIVEFUSE_PORT": "eighty"})


def test_overlap_setting(monkeypatch):
    import os

    from streamer.config import ServerConfig

    from streamer.config import usable_cores

    assert ServerConfig(overlap="on").overlap_for(9, cores=2) and not ServerConfig(overlap="off").overlap_for(1, cores=64)
    auto = ServerConfig()
    assert auto.overlap_for(1, cores=3) and not auto.overlap_for(1, cores=2)   # three cores per stream
    assert auto.overlap_for(2, cores=8) and not auto.overlap_for(3, cores=8)
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert usable_cores() == 1 and not auto.overlap_for(1)                   # pinned to one core
    assert ServerConfig.from_env({"LIVEFUSE_OVERLAP": "off"}).overlap == "off"
    with pytest.raises(ValueError, match="overlap"):
        ServerConfig(overlap="sometimes")


def test_hold_audio_reads_yes_and_no_from_the_environment():
    assert ServerConfig().hold_audio is True
    assert ServerConfig.from_env({"LIVEFUSE_HOLD_AUDIO": "off"}).hold_audio is False
    assert ServerConfig.from_env({"LIVEFUSE_HOLD_AUDIO": "1"}).hold_audio is True
    with pytest.raises(ValueError, match="LIVEFUSE_HOLD_AUDIO"):
        ServerConfig.from_env({"LIVEFUSE_HOLD_AUDIO": "maybe"})


def test_pixels_setting():
    assert ServerConfig().pixels == "cpu" and ServerConfig().pixel_device is None
    assert ServerConfig(pixels="cuda").pixel_device == "cuda"
    assert ServerConfig.from_env({"LIVEFUSE_PIXELS": "cuda:1"}).pixel_device == "cuda:1"
    for bad in ("gpu", "cuda:", "cuda:x", "CPU", "cuda:0 ", "mps"):
        with pytest.raises(ValueError, match="pixels must be cpu, cuda or cuda:N"):
            ServerConfig(pixels=bad)


def test_serving_cuda_pixels_without_cuda_stops_at_start_up_and_says_why(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the start-up refusal cannot happen here")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LIVEFUSE_PIXELS": "cuda"}
    proc = subprocess.run([sys.executable, "-m", "streamer.app.cli", "serve", "--port", "18931"], capture_output=True,
                          text=True, timeout=120, env=env, cwd=str(Path(__file__).parents[2]))
    assert proc.returncode != 0
    assert "pixels: 'cuda' asks for CUDA, but torch" in proc.stderr and "finds no CUDA device" in proc.stderr
