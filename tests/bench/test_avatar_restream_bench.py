"""`livefuse bench avatar` and `livefuse bench restream` run and print their figures, both sides each."""

from __future__ import annotations

import json

from streamer.app.cli import main


def test_bench_avatar_prints_off_and_outputs(capsys):
    assert main(["bench", "avatar", "--frames", "12", "--repeats", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    off, on = out["runs"]["off"][0], out["runs"]["outputs"][0]
    assert off["network_runs_per_frame"] == 0.0 and off["vmc_frames"] == 0
    assert on["vmc_frames"] >= 12 and on["vts_sent"] > 0 and on["face_events"] > 0
    assert out["summary"]["outputs_ms_cpu"] > out["summary"]["off_ms_cpu"] > 0


def test_bench_restream_prints_both_sides(capsys):
    assert main(["bench", "restream", "--seconds", "2", "--repeats", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"]["restream"][0]["push_state"] == "live" and out["runs"]["off"][0]["push_state"] is None
    assert out["summary"]["fps_off"] > 5 and out["summary"]["push_frames_per_s"] > 5
