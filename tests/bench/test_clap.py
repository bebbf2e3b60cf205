"""bench/_clap.py, the clapperboard `livefuse bench lipsync` measures with: at the source the flash and
the beep must start on the same instant (else the bench would measure its own sender), and the skews
pair each flash with its own beep."""

from __future__ import annotations

import numpy as np

from bench._clap import FPS, PERIOD_S, RATE, BeepTrack, Clapper, FlashTrack, skews_ms


async def test_flash_and_beep_start_together_at_the_source():
    clapper = Clapper()
    video, audio = FlashTrack(clapper), BeepTrack(clapper)
    frames = [await video.recv()]                        # the first frame sets the clapper's clock
    sound = []
    while len(frames) < FPS + 2:                         # a little over a second: the first clap is 0.53 s in
        frames.append(await video.recv())
        while len(sound) * 960 < (len(frames) / FPS + 0.05) * RATE:
            sound.append(await audio.recv())
    bright = [float(f.to_ndarray(format="rgb24").mean()) > 128 for f in frames]
    first_white = bright.index(True)
    assert not any(bright[:first_white]) and sum(bright) == 3      # one clap of three frames
    flash_at = video.start + first_white / FPS
    pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in sound])
    beep_at = audio.start + int(np.argmax(np.abs(pcm) > 1000)) / RATE
    assert abs(flash_at - clapper.t0) < 1e-6 and abs(beep_at - clapper.t0) < 3.0 / RATE   # within 3 samples
    assert np.abs(pcm[: int((clapper.t0 - audio.start) * RATE) - 48]).max() == 0  # silence before it


def test_each_flash_is_paired_with_the_nearest_beep():
    beeps = [1000.0, 2000.0, 3000.0]
    assert skews_ms([1040.0, 1980.0, 3100.0], beeps) == [40.0, -20.0, 100.0]
    assert skews_ms([1000.0 + PERIOD_S * 1000 * 0.7], [1000.0]) == []     # too far from any beep: not a pair
    assert skews_ms([1000.0], []) == []
