"""`livefuse serve` options reach the configuration they name."""

from __future__ import annotations

import argparse

from streamer.app.commands.serve import add_arguments, product_config


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_face_runtime_options_reach_the_backend_settings():
    backend = product_config(_args("--face-backend", "torch,interpreter", "--device", "cuda", "--batch-streams"),
                             "127.0.0.1").faces.backend
    assert backend.preference == ("torch", "interpreter") and backend.device == "cuda" and backend.share_across_streams
    default = product_config(_args(), "127.0.0.1").faces.backend
    assert not default.share_across_streams and default.preference[0] == "interpreter"


def test_no_still_makes_stream_sessions_compute_every_frame():
    from streamer.app.assembly import Product
    from streamer.session.session import Session

    assert product_config(_args(), "127.0.0.1").still.enabled
    config = product_config(_args("--no-still", "--stages", "faces,watermark"), "127.0.0.1")
    assert not config.still.enabled
    product = Product(config)
    try:
        pipeline = product.make_pipeline(Session("no-still"))       # a stream's pipeline, not a clip's
        try:
            assert pipeline.stages[0].detector.config.still_change == 0.0
        finally:
            pipeline.close()
    finally:
        product.close()


def test_hold_audio_is_on_unless_turned_off():
    assert _args().hold_audio is None                 # not given: ServerConfig's default (on) or the environment
    assert _args("--no-hold-audio").hold_audio is False


def test_public_host_reaches_the_access_policy_and_every_address_needs_one(tmp_path):
    import pytest

    from streamer.app.cli import main
    from streamer.safety.auth import AccessPolicy

    safety = product_config(_args("--public-host", "cam.example", "--public-host", "cam.example:8443"), "0.0.0.0").safety
    assert safety.public_hosts == ("cam.example", "cam.example:8443")
    assert AccessPolicy.for_host("0.0.0.0", public_hosts=safety.public_hosts).public_hosts == ("cam.example",)
    assert AccessPolicy.for_host("127.0.0.1").public_hosts == ("localhost", "127.0.0.1", "::1")
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tokens": []}')
    with pytest.raises(SystemExit, match="--public-host"):
        main(["serve", "--host", "0.0.0.0", "--port", "8099", "--tokens", str(tokens)])


def test_open_loopback_and_the_upload_limits_reach_their_settings(monkeypatch, tmp_path):
    """--open-loopback (or LIVEFUSE_OPEN_LOOPBACK) reaches the safety settings, and only on loopback; the
    upload limits' flags are ServerConfig fields like the rest."""
    import pytest

    from streamer.app.cli import main

    monkeypatch.delenv("LIVEFUSE_OPEN_LOOPBACK", raising=False)
    assert product_config(_args(), "127.0.0.1").safety.open_loopback is False
    assert product_config(_args("--open-loopback"), "127.0.0.1").safety.open_loopback is True
    monkeypatch.setenv("LIVEFUSE_OPEN_LOOPBACK", "1")
    assert product_config(_args(), "127.0.0.1").safety.open_loopback is True
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tokens": []}')
    with pytest.raises(SystemExit, match="loopback bind only"):
        main(["serve", "--host", "0.0.0.0", "--public-host", "cam.example", "--port", "8099", "--tokens", str(tokens)])
    args = _args("--min-body-rate", "1000", "--body-grace", "3", "--max-uploads", "4", "--max-photos", "2",
                 "--memory-budget", "1048576")
    assert (args.min_body_rate, args.body_grace_s, args.max_uploads, args.max_photos, args.memory_budget) == \
        (1000.0, 3.0, 4, 2, 1048576)
    from streamer.config import ServerConfig

    env = ServerConfig.from_env({"LIVEFUSE_MAX_UPLOADS": "5", "LIVEFUSE_MEMORY_BUDGET": "2097152",
                                 "LIVEFUSE_MIN_BODY_RATE": "0"})
    assert (env.max_uploads, env.memory_budget, env.min_body_rate) == (5, 2097152, 0.0)
    with pytest.raises(ValueError, match="max_photos"):
        ServerConfig(max_photos=0)


def test_swapper_options_and_environment_reach_the_product_config(monkeypatch, tmp_path):
    import pytest

    from streamer.app.commands.serve import _services_or_exit

    cfg = product_config(_args("--swapper", "a.onnx", "--swapper-embedder", "e.onnx", "--swapper-device", "cpu",
                               "--swapper-sha256", "ab" * 32, "--fusion", "both"), "127.0.0.1")
    assert (cfg.swapper.swapper, cfg.swapper.embedder, cfg.swapper.device) == ("a.onnx", "e.onnx", "cpu")
    assert cfg.swapper.swapper_sha256 == "ab" * 32 and cfg.fusion_mode == "both" and cfg.default_fusion == "both"
    monkeypatch.setenv("LIVEFUSE_SWAPPER", "env.onnx")
    monkeypatch.setenv("LIVEFUSE_SWAPPER_EMBEDDER", "env_e.onnx")
    monkeypatch.setenv("LIVEFUSE_SWAPPER_MAX_BATCH", "8")
    cfg = product_config(_args("--swapper-embedder", "flag_e.onnx"), "127.0.0.1")   # a flag beats the environment
    assert (cfg.swapper.swapper, cfg.swapper.embedder, cfg.swapper.max_batch) == ("env.onnx", "flag_e.onnx", 8)
    assert cfg.default_fusion == "neural"             # a swapper given: sessions start neural
    monkeypatch.setenv("LIVEFUSE_FUSION", "geometric")
    assert product_config(_args(), "127.0.0.1").default_fusion == "geometric"
    for var in ("LIVEFUSE_SWAPPER", "LIVEFUSE_SWAPPER_EMBEDDER", "LIVEFUSE_SWAPPER_MAX_BATCH", "LIVEFUSE_FUSION"):
        monkeypatch.delenv(var)
    assert product_config(_args(), "127.0.0.1").default_fusion == "geometric"
    with pytest.raises(ValueError, match="--fusion neural needs a swap model"):
        product_config(_args("--fusion", "neural"), "127.0.0.1")
    # a file that cannot be used stops `serve` before it starts, saying why
    with pytest.raises(SystemExit, match=r"livefuse serve: .*missing.onnx: no such model file"):
        _services_or_exit(_args("--swapper", str(tmp_path / "missing.onnx"), "--swapper-embedder", "e.onnx"), "127.0.0.1")


def test_results_option_reaches_the_product(monkeypatch, tmp_path):
    assert product_config(_args("--results", "s3://bucket/jobs"), "127.0.0.1").results == "s3://bucket/jobs"
    monkeypatch.setenv("LIVEFUSE_RESULTS", str(tmp_path / "r"))
    assert product_config(_args(), "127.0.0.1").results == str(tmp_path / "r")


def test_opencv_threads_are_one_per_server_process_unless_set():
    """`livefuse serve` sets OpenCV's threads once (ServerConfig.cv2_threads, default 1; --cv2-threads and
    LIVEFUSE_CV2_THREADS change it): on a shared host the streams are the parallelism."""
    import cv2
    import pytest

    from streamer.app.commands.serve import apply_process_settings
    from streamer.config import ServerConfig
    from streamer.rtc.encoder_settings import h264_preset, set_h264_preset

    assert _args("--cv2-threads", "2").cv2_threads == 2 and _args().cv2_threads is None
    assert ServerConfig.from_env({}).cv2_threads == 1
    assert ServerConfig.from_env({"LIVEFUSE_CV2_THREADS": "2"}).cv2_threads == 2
    assert ServerConfig.from_env({}, cv2_threads=3).cv2_threads == 3
    with pytest.raises(ValueError, match="cv2_threads"):
        ServerConfig(cv2_threads=0)
    before_threads, before_preset = cv2.getNumThreads(), h264_preset()
    try:
        apply_process_settings(ServerConfig())
        assert cv2.getNumThreads() == 1
        apply_process_settings(ServerConfig(cv2_threads=2))
        assert cv2.getNumThreads() == 2
    finally:
        cv2.setNumThreads(before_threads)
        set_h264_preset(before_preset)


def _listening_socket():
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def test_serve_on_a_taken_port_exits_with_one_line_and_the_way_out():
    """`livefuse serve` (the console script, as `make serve` runs it) on a port another process listens
    on: a non-zero status, one line that names a port to use instead and the make variable, no traceback,
    and no "LiveFuse on ..." announcement of a server that never listened."""
    import subprocess
    import sys
    from pathlib import Path

    from streamer.app.commands.serve import port_problem

    livefuse = Path(sys.executable).with_name("livefuse")
    with _listening_socket() as taken:
        port = taken.getsockname()[1]
        proc = subprocess.run([str(livefuse), "serve", "--host", "127.0.0.1", "--port", str(port)],
                              capture_output=True, text=True, timeout=120)
        expected = port_problem("127.0.0.1", port)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert lines == [expected], lines
    alt = int(expected.split("try --port ")[1].split(",")[0])
    assert expected == f"port {port} is in use: try --port {alt}, or make serve PORT={alt}" and alt > port
    assert "Traceback" not in proc.stderr and "LiveFuse on" not in proc.stderr


def test_a_free_port_has_no_problem_and_a_taken_one_suggests_a_free_one():
    import socket

    from streamer.app.commands.serve import port_problem

    with _listening_socket() as taken:
        port = taken.getsockname()[1]
        problem = port_problem("127.0.0.1", port)
    assert problem is not None and problem.startswith(f"port {port} is in use: try --port ")
    alt = int(problem.split("try --port ")[1].split(",")[0])
    with socket.socket() as probe:   # the suggested port really is free
        probe.bind(("127.0.0.1", alt))
    assert port_problem("127.0.0.1", alt) is None
