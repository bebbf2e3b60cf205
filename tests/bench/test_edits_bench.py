"""`livefuse bench edits` runs and prints the renderer's cost at three face sizes, every variant it names,
and all-edits' planning and pixel work apart."""

from __future__ import annotations

import json

from streamer.app.cli import main


def test_bench_edits_prints_each_face_size_and_the_split(capsys):
    assert main(["bench", "edits", "--renderer-only", "--no-torch", "--frames", "3", "--value", "1.0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    widths = [out[k]["face_width_px"] for k in ("renderer", "renderer_closeup", "renderer_near")]
    assert widths == sorted(widths) and widths[0] > 100 and widths[-1] > 220      # 112, 180, 242 px
    for k in ("renderer", "renderer_closeup", "renderer_near"):
        rows = out[k]["numpy"]
        for variant in ("all", "geometry", "appearance", "all_uncapped", "all_plan", "all_pixels"):
            assert rows[variant]["n"] == 3 and rows[variant]["median_ms"] > 0, (k, variant)
        # the split is the same work as "all" less the frame's copy: neither half is the whole
        assert rows["all_plan"]["median_ms"] < rows["all"]["median_ms"]
        assert rows["all_pixels"]["median_ms"] < rows["all"]["median_ms"]
    assert "prompt_switch" not in out
