"""Writing processed video to a file with PyAV, keeping the input's audio (copied when the container
takes its codec, re-encoded otherwise)."""

from __future__ import annotations

import fractions
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av

# container -> (default video codec, audio codecs it takes as they are, audio codec to re-encode to)
CONTAINERS: dict[str, tuple[str, frozenset[str], str]] = {
    ".mp4": ("libx264", frozenset({"aac", "mp3", "alac", "opus", "ac3"}), "aac"),
    ".m4v": ("libx264", frozenset({"aac", "mp3", "alac", "ac3"}), "aac"),
    ".mov": ("libx264", frozenset({"aac", "mp3", "alac", "pcm_s16le", "pcm_s24le", "ac3"}), "aac"),
    ".mkv": ("libx264", frozenset({"aac", "mp3", "opus", "vorbis", "flac", "pcm_s16le", "ac3", "alac"}), "aac"),
    ".webm": ("libvpx", frozenset({"opus", "vorbis"}), "libopus"),
}


@dataclass(frozen=True, slots=True)
class VideoFileSettings:
    codec: str | None = None      # None: the container's default (libx264 for mp4/mkv/mov, libvpx for webm)
    crf: int = 20                 # libx264 quality (lower is better)
    bitrate: int = 4_000_000      # libvpx target, bits/s
    preset: str = "veryfast"


class VideoFileWriter:
    """One output file. `write_video(frame)` encodes a processed frame; `copy_audio(packet)` remuxes."""

    def __init__(self, path: str | Path, *, width: int, height: int, rate: fractions.Fraction,
                 audio: Any = None, settings: VideoFileSettings = VideoFileSettings()) -> None:
        self.path = Path(path)
        ext = self.path.suffix.lower()
        if ext not in CONTAINERS:
            raise ValueError(f"output {self.path.name}: use one of {', '.join(CONTAINERS)}")
        default_codec, copyable, audio_codec = CONTAINERS[ext]
        self.container = av.open(str(self.path), "w")
        codec = settings.codec or default_codec
        self.video = self.container.add_stream(codec, rate=rate)
        self.video.width, self.video.height = width - width % 2, height - height % 2
        self.video.pix_fmt = "yuv420p"
        if codec == "libx264":
            self.video.options = {"crf": str(settings.crf), "preset": settings.preset}
        else:
            self.video.bit_rate = settings.bitrate
        self.audio_in = audio
        self.audio_out = None
        self.resampler = None
        self.audio_copied = False
        if audio is not None:
            if audio.codec_context.name in copyable:
                self.audio_out = self.container.add_stream_from_template(audio)
                self.audio_copied = True
            else:
                self.audio_out = self.container.add_stream(audio_codec, rate=audio.rate or 48000)
                self.resampler = av.AudioResampler(format=self.audio_out.codec_context.format.name,
                                                   layout=audio.layout.name if audio.layout else "stereo",
                                                   rate=self.audio_out.rate)

    def write_video(self, frame: av.VideoFrame) -> None:
        if frame.width != self.video.width or frame.height != self.video.height:
            frame = frame.reformat(width=self.video.width, height=self.video.height)
        for packet in self.video.encode(frame):
            self.container.mux(packet)

    def write_audio_packet(self, packet: av.Packet) -> None:
        if self.audio_out is None or packet.dts is None:
            return
        if self.audio_copied:
            packet.stream = self.audio_out
            self.container.mux(packet)
            return
        for frame in packet.decode():
            for rs in self.resampler.resample(frame):
                for p in self.audio_out.encode(rs):
                    self.container.mux(p)

    def close(self) -> None:
        for p in self.video.encode(None):
            self.container.mux(p)
        if self.audio_out is not None and not self.audio_copied:
            for rs in self.resampler.resample(None):
                for p in self.audio_out.encode(rs):
                    self.container.mux(p)
            for p in self.audio_out.encode(None):
                self.container.mux(p)
        self.container.close()
