"""VMC out, read back by an independent OSC decoder (python-osc) from a real UDP socket: every ARKit name
each frame, VMC's messages in order and with their types, Unity's handedness, mirroring, datagram sizes,
and a sender that never raises."""

from __future__ import annotations

import socket
import struct
import time

import numpy as np
import pytest
from pythonosc.osc_message import OscMessage
from pythonosc.osc_packet import OscPacket

from engines.face_rig import ARKIT_NAMES, FaceFrame, _rotation, quaternion_of
from streamer.sinks.vmc import LOOPBACK_DATAGRAM, MAX_DATAGRAM, VmcEncoder, VmcSender, VmcSettings, parse_target


def frame(t: float = 0.5, yaw: float = 20.0, blink_left: float = 0.8, x: float = 0.02) -> FaceFrame:
    scores = np.linspace(0.0, 0.5, len(ARKIT_NAMES))
    scores[ARKIT_NAMES.index("eyeBlinkLeft")] = blink_left
    scores[ARKIT_NAMES.index("eyeBlinkRight")] = 0.1
    q = quaternion_of(_rotation(yaw, 0.0, 0.0))
    return FaceFrame(t=t, found=True, track_id=1, scores=scores, yaw=yaw, pitch=0.0, roll=0.0,
                     quaternion=tuple(float(v) for v in q), position=(x, 0.0, 0.0), gaze=(0.0, 0.0, 0.0, 0.0))


def decode(datagrams: list[bytes]) -> list[tuple[str, list]]:
    out = []
    for d in datagrams:
        for m in OscPacket(d).messages:
            out.append((m.message.address, list(m.message.params)))
    return out


def test_one_frame_in_vmc_order_with_every_name():
    msgs = decode(VmcEncoder().datagrams(frame()))
    addresses = [a for a, _ in msgs]
    assert addresses[:4] == ["/VMC/Ext/OK", "/VMC/Ext/T", "/VMC/Ext/Root/Pos", "/VMC/Ext/Bone/Pos"]
    assert addresses[-1] == "/VMC/Ext/Blend/Apply" and msgs[-1][1] == []
    assert msgs[0][1] == [1] and msgs[1][1] == [pytest.approx(0.5)]
    assert msgs[3][1][0] == "Head" and len(msgs[3][1]) == 8 and msgs[2][1][0] == "root"
    blends = {p[0]: p[1] for a, p in msgs if a == "/VMC/Ext/Blend/Val"}
    assert set(ARKIT_NAMES) <= set(blends) and {"Blink_L", "Blink_R", "A", "U", "O"} <= set(blends)
    assert all(0.0 <= v <= 1.0 for v in blends.values())


def test_mirror_swaps_sides_and_unity_handedness():
    f = frame(yaw=20.0, blink_left=0.8, x=0.02)
    mirrored = decode(VmcEncoder(VmcSettings(mirror=True)).datagrams(f))
    plain = decode(VmcEncoder(VmcSettings(mirror=False)).datagrams(f))

    def blends(msgs):
        return {p[0]: p[1] for a, p in msgs if a == "/VMC/Ext/Blend/Val"}

    def head(msgs):
        return next(p for a, p in msgs if a == "/VMC/Ext/Bone/Pos")

    # the user's left eye closes: the avatar's right as a mirror image, its left as the user's own motion
    assert blends(mirrored)["eyeBlinkRight"] == pytest.approx(0.8) and blends(mirrored)["Blink_R"] == pytest.approx(0.8)
    assert blends(plain)["eyeBlinkLeft"] == pytest.approx(0.8) and blends(plain)["Blink_L"] == pytest.approx(0.8)
    # a turn to the user's left (yaw > 0): Unity's y rotation turns the avatar toward its right (+x) as a
    # mirror image (qy > 0), toward its left as the user's own motion (qy < 0); x moves the same way
    assert head(mirrored)[5] > 0.1 and head(plain)[5] < -0.1
    assert head(mirrored)[1] == pytest.approx(0.02) and head(plain)[1] == pytest.approx(-0.02)


def test_bundles_stay_under_one_datagram_each():
    datagrams = VmcEncoder().datagrams(frame())
    assert len(datagrams) >= 2 and all(len(d) <= MAX_DATAGRAM for d in datagrams)
    assert all(d.startswith(b"#bundle\x00") for d in datagrams)


@pytest.mark.parametrize("mirror,presets,move_root", [(True, True, True), (False, True, False), (True, False, True)])
@pytest.mark.parametrize("size", [MAX_DATAGRAM, LOOPBACK_DATAGRAM, 300])
def test_the_precompiled_bundles_hold_exactly_the_messages_encoded_one_by_one(mirror, presets, move_root, size):
    """`datagrams` packs each bundle with one struct laid out once; python-osc reads from them the very
    messages `messages` encodes one at a time, in order, float for float, in bundles of the same bytes."""
    enc = VmcEncoder(VmcSettings(mirror=mirror, vrm_presets=presets, move_root=move_root), size)
    rng = np.random.default_rng(4)
    for t in (0.0, 0.5, 123.25):
        f = frame(t=t, yaw=float(rng.uniform(-40, 40)), blink_left=float(rng.uniform(0, 1)), x=float(rng.normal()))
        datagrams = enc.datagrams(f)
        messages = enc.messages(f)
        assert decode(datagrams) == [(m.address, list(m.params)) for m in map(OscMessage, messages)]
        assert all(len(d) <= size for d in datagrams) and all(d.startswith(b"#bundle\x00") for d in datagrams)
        assert b"".join(d[16:] for d in datagrams) == b"".join(struct.pack(">i", len(m)) + m for m in messages)


def test_a_value_past_float32_goes_as_infinity():
    f = frame(x=1e39)
    head = next(p for a, p in decode(VmcEncoder().datagrams(f)) if a == "/VMC/Ext/Bone/Pos")
    assert head[1] == float("inf")


def test_sender_reaches_a_udp_receiver_every_frame():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2.0)
    sender = VmcSender(f"127.0.0.1:{rx.getsockname()[1]}")
    try:
        frames = 30
        for i in range(frames):
            assert sender.send(frame(t=i / 30.0, blink_left=i / frames))
        applies, per_frame, names = 0, [], set()
        while applies < frames:
            for address, params in decode([rx.recv(65536)]):
                if address == "/VMC/Ext/Blend/Val":
                    names.add(params[0])
                    assert 0.0 <= params[1] <= 1.0
                elif address == "/VMC/Ext/Blend/Apply":
                    applies += 1
                    per_frame.append(set(names))
                    names = set()
        assert all(set(ARKIT_NAMES) <= n for n in per_frame) and len(per_frame) == frames
        assert sender.status()["frames"] == frames and sender.dropped == 0
        assert len(sender.encoder.datagrams(frame())) == 1      # loopback: the frame in one datagram
    finally:
        sender.close()
        rx.close()


def test_a_closed_port_or_a_bad_host_never_raises_and_is_named():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sender = VmcSender(f"127.0.0.1:{port}", VmcSettings(error_hold_s=0.3))   # nothing listens: ICMP port unreachable comes back
    for i in range(6):
        sender.send(frame(t=i / 30))
    assert sender.frames + sender.dropped == 6 and sender.dropped >= 2
    assert "nothing listens for VMC" in sender.status()["error"]      # every other send is refused: held, not flapping
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)               # the avatar app starts on that port
    rx.bind(("127.0.0.1", port))
    try:
        sender.send(frame())                      # may still hear the answer to the last datagram
        time.sleep(0.35)
        assert sender.send(frame()) is True and sender.status()["error"] is None
        assert rx.recv(65536).startswith(b"#bundle")
    finally:
        rx.close()
        sender.close()
    bad = VmcSender("no-such-host.invalid:39539")
    assert bad.send(frame()) is False and "cannot reach" in bad.status()["error"]


@pytest.mark.parametrize("text,expected", [("127.0.0.1:39540", ("127.0.0.1", 39540)), ("localhost", ("localhost", 39539)),
                                           (":40000", ("127.0.0.1", 40000)), ("[::1]:9000", ("::1", 9000))])
def test_targets(text, expected):
    assert parse_target(text) == expected


@pytest.mark.parametrize("text", ["", "host:0", "host:99999", "host:port", "[::1", "a b:1"])
def test_bad_targets_say_why(text):
    with pytest.raises(ValueError):
        parse_target(text)
