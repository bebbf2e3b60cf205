"""`livefuse bench background` runs and prints its figures: off and on per mode, both clips and cadences."""

from __future__ import annotations

import json

from streamer.app.cli import main


def test_bench_background_prints_off_and_on_per_mode(capsys):
    assert main(["bench", "background", "--frames", "3", "--no-quality", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["network_alone"]["median_ms"] > 0
    for clip in ("still_every2", "still_every1", "swaying_every2", "moving_every2", "moving_every1"):
        for mode in ("blur", "color", "image"):
            row = out["timing"][clip][mode]
            assert row["on"]["median_ms"] > row["off"]["median_ms"] >= 0
    walking = out["timing"]["moving_every2"]["color"]     # the network every other frame, the matte carried between
    assert walking["network_runs_per_frame"] == 0.5 and walking["carried_per_frame"] > 0
