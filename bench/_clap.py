"""A clapperboard for `livefuse bench lipsync`: a sender whose picture flashes white while its sound beeps,
both starting on the same instant once a second, and the script a browser runs to note when it shows each
flash and plays each beep.

The flashes fall on the video's own frame grid (15 fps, exact frame times), so at the source the flash and
the beep start together to the sample. In the browser the flash time is the frame's expected display time
(requestVideoFrameCallback) and the beep time is when Web Audio plays its first loud sample (the
ScriptProcessor's playback time, less its buffer, mapped to the page clock by getOutputTimestamp); both
on `performance.now()`. A skew below zero means the picture comes before the sound.
"""

from __future__ import annotations

import asyncio
import fractions
import time

import numpy as np
from aiortc.mediastreams import MediaStreamTrack
from av import AudioFrame, VideoFrame

PERIOD_S = 1.0      # one clap a second
FLASH_S = 0.2       # three frames at 15 fps: a slow stage or a dropped frame cannot hide it
FPS = 15            # the default; at 30 fps keep the server's stage under 33 ms so no frame is dropped
RATE, SAMPLES = 48_000, 960
BEEP_HZ = 1000.0


class Clapper:
    """The shared clock: claps at t0 + k * PERIOD_S (time.time), t0 set by the video's first frame."""

    def __init__(self) -> None:
        self.t0: float | None = None

    def on(self, t: float | np.ndarray) -> bool | np.ndarray:
        if self.t0 is None:
            return np.zeros_like(t, dtype=bool) if isinstance(t, np.ndarray) else False
        since = np.asarray(t) - self.t0 + 1e-6          # 1 us of slack for float rounding on the frame grid
        return (since >= 0) & ((since % PERIOD_S) < FLASH_S)


class FlashTrack(MediaStreamTrack):
    kind = "video"

    def __init__(self, clapper: Clapper, size: tuple[int, int] = (320, 240), fps: int = FPS) -> None:
        super().__init__()
        self.clapper, self.size, self.fps, self.n, self.start = clapper, size, fps, 0, None

    async def recv(self) -> VideoFrame:
        if self.start is None:
            self.start = time.time()
            self.clapper.t0 = self.start + round(0.5 * self.fps) / self.fps   # the first clap half a second in, on a frame
        due = self.start + self.n / self.fps
        await asyncio.sleep(max(0.0, due - time.time()))
        w, h = self.size
        frame = VideoFrame.from_ndarray(np.full((h, w, 3), 235 if self.clapper.on(due) else 20, np.uint8), format="rgb24")
        frame.pts, frame.time_base = self.n * (90_000 // self.fps), fractions.Fraction(1, 90_000)
        self.n += 1
        return frame


class BeepTrack(MediaStreamTrack):
    kind = "audio"

    def __init__(self, clapper: Clapper) -> None:
        super().__init__()
        self.clapper, self.k, self.start = clapper, 0, None

    async def recv(self) -> AudioFrame:
        if self.start is None:
            self.start = time.time()
        first = self.start + self.k * SAMPLES / RATE       # each frame leaves when its first sample is due
        await asyncio.sleep(max(0.0, first - time.time()))
        t = first + np.arange(SAMPLES) / RATE
        pcm = (self.clapper.on(t) * 9000 * np.sin(2 * np.pi * BEEP_HZ * t)).astype("<i2")
        frame = AudioFrame(format="s16", layout="mono", samples=SAMPLES)
        frame.planes[0].update(pcm.tobytes())
        frame.sample_rate, frame.pts, frame.time_base = RATE, self.k * SAMPLES, fractions.Fraction(1, RATE)
        self.k += 1
        return frame


# A receive-only peer in the page: it POSTs its offer to `path` (WHEP, or the bench's direct sender),
# plays the stream in a muted <video> and taps the audio through Web Audio; the flash and beep times
# gather in window.__claps.
VIEWER_JS = r"""async (path) => {
  const out = {video: [], audio: [], errors: []};
  window.__claps = out;
  const pc = new RTCPeerConnection({iceServers: []});
  pc.addTransceiver('video', {direction: 'recvonly'});
  pc.addTransceiver('audio', {direction: 'recvonly'});
  const stream = new MediaStream();
  const v = document.createElement('video');
  v.muted = true; v.autoplay = true; v.playsInline = true;
  document.body.appendChild(v);
  const ctx = new AudioContext();
  pc.ontrack = (e) => {
    stream.addTrack(e.track);
    v.srcObject = stream;
    if (e.track.kind !== 'audio') return;
    const src = ctx.createMediaStreamSource(new MediaStream([e.track]));
    const proc = ctx.createScriptProcessor(256, 1, 1);
    let loud = false;
    proc.onaudioprocess = (ev) => {
      const x = ev.inputBuffer.getChannelData(0);
      let first = -1;
      for (let i = 0; i < x.length; i++) if (Math.abs(x[i]) > 0.1) { first = i; break; }
      if (first >= 0 && !loud) {
        const ts = ctx.getOutputTimestamp();
        const played = ev.playbackTime - (x.length - first) / ctx.sampleRate;
        out.audio.push(ts.performanceTime + (played - ts.contextTime) * 1000);
      }
      loud = first >= 0;
    };
    src.connect(proc); proc.connect(ctx.destination);
  };
  const c = document.createElement('canvas'); c.width = 8; c.height = 8;
  const g = c.getContext('2d', {willReadFrequently: true});
  let bright = false;
  const onFrame = (now, meta) => {
    g.drawImage(v, 0, 0, 8, 8);
    const d = g.getImageData(0, 0, 8, 8).data;
    let s = 0; for (let i = 0; i < d.length; i += 4) s += d[i];
    const on = s / 64 > 128;
    if (on && !bright) out.video.push(meta.expectedDisplayTime);
    bright = on;
    v.requestVideoFrameCallback(onFrame);
  };
  v.requestVideoFrameCallback(onFrame);
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((done) => {
    if (pc.iceGatheringState === 'complete') return done();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && done();
  });
  const r = await fetch(path, {method: 'POST', headers: {'Content-Type': 'application/sdp'}, body: pc.localDescription.sdp});
  if (r.status !== 201) { out.errors.push(`${path}: ${r.status} ${await r.text()}`); return out.errors; }
  await pc.setRemoteDescription({type: 'answer', sdp: await r.text()});
  window.__clapPc = pc;
  return out.errors;
}"""


def skews_ms(video_ms: list[float], audio_ms: list[float]) -> list[float]:
    """Per flash shown, its display time minus the nearest beep's play time (ms; below zero: picture first).
    Flashes with no beep within half a period are left out."""
    a = np.asarray(audio_ms, np.float64)
    out = []
    for v in video_ms:
        if a.size:
            d = v - a[np.argmin(np.abs(a - v))]
            if abs(d) < PERIOD_S * 500:
                out.append(round(float(d), 1))
    return out
