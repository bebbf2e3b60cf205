"""An independent WHIP client: GStreamer's webrtcbin, driven through python3-gi.

python3-gi lives in Debian's system Python, not in the project's virtual environment, so this file runs as
`/usr/bin/python3 bench/_gst_whip.py ...` in a child process, imports only the standard library and gi,
and prints one JSON line with what it saw. Used by tests/e2e/test_gstreamer_whip.py and
`livefuse bench stream --client gstreamer`.

It publishes a still photo (looped live by imagefreeze) as VP8 or H264 with webrtcbin's own offer, sent
unmodified (`a=setup:actpass`, webrtcbin's RSA certificate), sendrecv; decodes the video the server sends
back; and ends the session with a WHIP DELETE. libnice skips loopback when it gathers, so the ICE agent is
told about 127.0.0.1 explicitly (and, once told, gathers only that address).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstSdp", "1.0")
gi.require_version("GstWebRTC", "1.0")
gi.require_version("Nice", "0.1")
from gi.repository import GLib, Gst, GstSdp, GstWebRTC, Nice  # noqa: E402

ENCODERS = {
    "VP8": "vp8enc deadline=1 cpu-used=8 keyframe-max-dist=30 ! rtpvp8pay pt=96 ! "
           "application/x-rtp,media=video,encoding-name=VP8,payload=96,clock-rate=90000",
    "H264": "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 bframes=0 ! "
            "video/x-h264,profile=constrained-baseline ! rtph264pay pt=102 config-interval=-1 aggregate-mode=zero-latency ! "
            "application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000",
}

DECODERS = {"VP8": "rtpvp8depay ! vp8dec", "H264": "rtph264depay ! h264parse ! avdec_h264"}


def _http(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class Client:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.loop = GLib.MainLoop()
        self.report: dict = {"codec": args.codec, "frames_received": 0}
        self.lock = threading.Lock()
        self.last_frames: collections.deque[bytes] = collections.deque(maxlen=args.keep)
        self.t_post: float | None = None
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.location: str | None = None
        w, h, fps = args.width, args.height, args.fps
        self.pipe = Gst.parse_launch(
            f"webrtcbin name=rtc latency=50 "
            f"filesrc location={args.image} ! decodebin ! videoconvert ! videoscale ! imagefreeze is-live=true ! "
            f"video/x-raw,width={w},height={h},framerate={fps}/1 ! videoconvert ! video/x-raw,format=I420 ! queue ! "
            f"{ENCODERS[args.codec]} ! rtc.")
        self.rtc = self.pipe.get_by_name("rtc")
        # a Python reference to the ICE agent keeps the address it was given; libnice skips loopback otherwise
        self.ice = self.rtc.get_property("ice-agent")
        self.nice = self.ice.get_property("agent")
        addr = Nice.Address.new()
        addr.set_from_string("127.0.0.1")
        self.nice.add_local_address(addr)
        self.rtc.connect("on-negotiation-needed", self._on_negotiation_needed)
        self.rtc.connect("notify::ice-gathering-state", self._on_gathering)
        self.rtc.connect("notify::connection-state", self._on_connection_state)
        self.rtc.connect("pad-added", self._on_pad)
        bus = self.pipe.get_bus()
        bus.add_signal_watch()
        bus.connect("message::error", self._on_error)
        self._offered = False

    # --- signaling
    def _on_negotiation_needed(self, _rtc) -> None:
        trans = self.rtc.emit("get-transceiver", 0)
        if trans is not None:
            trans.set_property("direction", GstWebRTC.WebRTCRTPTransceiverDirection.SENDRECV)
        promise = Gst.Promise.new_with_change_func(self._on_offer, None)
        self.rtc.emit("create-offer", None, promise)

    def _on_offer(self, promise, _data) -> None:
        promise.wait()
        reply = promise.get_reply()      # keep it: the offer is borrowed from it (a temporary would free it)
        offer = reply.get_value("offer")
        self.rtc.emit("set-local-description", offer, Gst.Promise.new_with_change_func(self._on_local_set, None))

    def _on_local_set(self, promise, _data) -> None:
        reply = promise.get_reply()
        if reply is not None and reply.has_field("error"):
            self.report["error"] = f"set-local-description: {reply.to_string()}"
            GLib.idle_add(self.loop.quit)

    def _on_gathering(self, *_a) -> None:
        if self.rtc.get_property("ice-gathering-state") != GstWebRTC.WebRTCICEGatheringState.COMPLETE or self._offered:
            return
        self._offered = True
        desc = self.rtc.get_property("local-description")   # held while its sdp is read, like the offer above
        sdp = desc.sdp.as_text()
        self.report["offer_setup"] = [l.strip() for l in sdp.splitlines() if l.startswith("a=setup:")]
        threading.Thread(target=self._post, args=(sdp,), daemon=True).start()

    def _post(self, sdp: str) -> None:
        headers = {"Content-Type": "application/sdp"}
        if self.args.token:
            headers["Authorization"] = f"Bearer {self.args.token}"
        self.t_post = time.monotonic()
        status, resp_headers, body = _http("POST", self.args.url, sdp.encode(), headers)
        self.report["post_status"] = status
        if status != 201:
            self.report["error"] = f"POST answered {status}: {body[:300]!r}"
            GLib.idle_add(self.loop.quit)
            return
        self.location = urllib.parse.urljoin(self.args.url, resp_headers.get("Location", ""))
        self.report["location"] = self.location
        self.report["session"] = resp_headers.get("X-LiveFuse-Session")
        answer_sdp = body.decode()
        self.report["answer_setup"] = [l.strip() for l in answer_sdp.splitlines() if l.startswith("a=setup:")]
        GLib.idle_add(self._set_answer, answer_sdp)

    def _set_answer(self, text: str) -> bool:
        _res, msg = GstSdp.SDPMessage.new_from_text(text)
        answer = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, msg)
        self.rtc.emit("set-remote-description", answer, Gst.Promise.new())
        return False

    def _on_connection_state(self, *_a) -> None:
        state = self.rtc.get_property("connection-state")
        self.report.setdefault("connection_states", []).append(state.value_nick)
        if state == GstWebRTC.WebRTCPeerConnectionState.FAILED:
            self.report["error"] = "webrtcbin connection failed"
            GLib.idle_add(self.loop.quit)

    # --- the stream coming back
    def _on_pad(self, _rtc, pad) -> None:
        if pad.get_direction() != Gst.PadDirection.SRC:
            return
        caps = pad.get_current_caps()
        name = caps.get_structure(0).get_string("encoding-name") if caps is not None else self.args.codec
        depay = DECODERS.get((name or "").upper())
        if depay is None:
            self.report["error"] = f"the server sent {name!r}, which this client does not decode"
            GLib.idle_add(self.loop.quit)
            return
        decode = Gst.parse_bin_from_description(
            f"queue ! {depay} ! videoconvert ! video/x-raw,format=RGB ! appsink name=out emit-signals=true sync=false", True)
        self.pipe.add(decode)
        decode.sync_state_with_parent()
        if pad.link(decode.get_static_pad("sink")) != Gst.PadLinkReturn.OK:
            self.report["error"] = f"could not link the incoming {name} stream"
            GLib.idle_add(self.loop.quit)
            return
        decode.get_by_name("out").connect("new-sample", self._on_sample)

    def _on_sample(self, sink) -> Gst.FlowReturn:
        sample = sink.emit("pull-sample")
        caps = sample.get_caps().get_structure(0)
        buf = sample.get_buffer()
        ok, info = buf.map(Gst.MapFlags.READ)
        if ok:
            with self.lock:
                now = time.monotonic()
                if self.t_first is None:
                    self.t_first = now
                self.t_last = now
                self.report["frames_received"] += 1
                self.report["width"], self.report["height"] = caps.get_value("width"), caps.get_value("height")
                self.last_frames.append(bytes(info.data))
            buf.unmap(info)
        if self.report["frames_received"] >= self.args.frames:
            GLib.idle_add(self.loop.quit)
        return Gst.FlowReturn.OK

    def _on_error(self, _bus, msg) -> None:
        err, debug = msg.parse_error()
        self.report["error"] = f"{err.message} ({debug})"
        self.loop.quit()

    def _timeout(self) -> bool:
        self.report.setdefault("error", f"timed out after {self.args.timeout} s")
        self.loop.quit()
        return False

    def run(self) -> dict:
        self.pipe.set_state(Gst.State.PLAYING)
        GLib.timeout_add(int(self.args.timeout * 1000), self._timeout)
        self.loop.run()
        r = self.report
        if self.t_first is not None and self.t_post is not None:
            r["first_frame_s"] = round(self.t_first - self.t_post, 3)
            span = (self.t_last or self.t_first) - self.t_first
            r["fps"] = round((r["frames_received"] - 1) / span, 1) if span > 0 else None
        if self.last_frames and self.args.dump:
            with open(self.args.dump, "wb") as f:
                f.write(b"".join(self.last_frames))
            r["dump"], r["dumped_frames"] = self.args.dump, len(self.last_frames)
        if self.location:
            headers = {"Authorization": f"Bearer {self.args.token}"} if self.args.token else {}
            r["delete_status"] = _http("DELETE", self.location, None, headers)[0]
        self.pipe.set_state(Gst.State.NULL)
        return r


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="the WHIP endpoint, e.g. http://127.0.0.1:8080/whip")
    p.add_argument("--image", required=True, help="a photo to publish (PNG or JPEG)")
    p.add_argument("--codec", choices=sorted(ENCODERS), default="VP8")
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--fps", type=int, default=15)
    p.add_argument("--frames", type=int, default=60, help="stop after this many frames back")
    p.add_argument("--timeout", type=float, default=90.0)
    p.add_argument("--token", default="")
    p.add_argument("--dump", default="", help="write the last frames back here as raw RGB (n x height x width x 3)")
    p.add_argument("--keep", type=int, default=8, help="how many of the last frames --dump writes (default 8)")
    args = p.parse_args(argv)
    Gst.init(None)
    report = Client(args).run()
    print(json.dumps(report), flush=True)
    return 0 if "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
