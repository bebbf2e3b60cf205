"""The data-channel protocol refuses garbage with a reason and turns good messages into control changes."""

from __future__ import annotations

import json

import pytest

from streamer.session import protocol
from streamer.session.protocol import ProtocolError, params_to_controls, parse_client_message
from streamer.session.session import Session

LIMIT = 16 * 1024


@pytest.mark.parametrize(
    "raw, code",
    [
        ("{not json", "bad_json"),
        (b"\xff\xfe", "bad_json"),
        ("[1, 2]", "unknown_type"),
        ('{"type": "launch_rockets"}', "unknown_type"),
        ('{"text": "hi"}', "unknown_type"),
        ('{"type": "set_prompt"}', "invalid"),
        ('{"type": "set_prompt", "text": 5}', "invalid"),
        ('{"type": "set_prompt", "text": "' + "a" * 501 + '"}', "invalid"),
        ('{"type": "set_params"}', "invalid"),
        ('{"type": "set_params", "strength": 3}', "invalid"),
        ('{"type": "set_params", "edits": {"smile": 2}}', "invalid"),
        ('{"type": "set_params", "edits": {"Bad Name": 0.1}}', "invalid"),
        ('{"type": "set_params", "edits": {"teleport": 0.1}}', "invalid"),
        ('{"type": "set_params", "keep_eyes": "yes"}', "invalid"),
        ('{"type": "set_params", "colours": {"smile": "red"}}', "invalid"),          # only makeup takes a colour
        ('{"type": "set_params", "colours": {"lip_tint": "teal-ish"}}', "invalid"),
        ('{"type": "set_params", "colours": {"lip_tint": "#12345"}}', "invalid"),
        ('{"type": "set_params", "strength": 0.5, "extra": 1}', "invalid"),
        ('{"type": "ping", "t": "soon"}', "invalid"),
    ],
)
def test_garbage_is_refused_with_a_code(raw, code):
    with pytest.raises(ProtocolError) as err:
        parse_client_message(raw, max_bytes=LIMIT)
    assert err.value.code == code and err.value.message


def test_a_refusal_carries_the_refused_messages_id_so_a_waiting_client_is_answered():
    with pytest.raises(ProtocolError) as err:
        parse_client_message('{"type": "set_params", "strength": 7, "id": 41}', max_bytes=LIMIT)
    assert err.value.reply() == {"type": "error", "code": "invalid", "message": err.value.message, "id": 41}
    with pytest.raises(ProtocolError) as err:
        parse_client_message('{"type": "shout", "id": 42}', max_bytes=LIMIT)
    assert err.value.reply()["id"] == 42
    for raw in ('{"type": "shout", "id": "7"}', '{"type": "shout", "id": true}', "{oops"):
        with pytest.raises(ProtocolError) as err:
            parse_client_message(raw, max_bytes=LIMIT)
        assert "id" not in err.value.reply()


def test_oversized_message_is_refused_before_parsing():
    raw = json.dumps({"type": "set_prompt", "text": "x" * 400}) + " " * LIMIT
    with pytest.raises(ProtocolError) as err:
        parse_client_message(raw, max_bytes=LIMIT)
    assert err.value.code == "too_large" and str(LIMIT) in err.value.message


def test_invalid_message_names_the_field():
    with pytest.raises(ProtocolError, match="strength"):
        parse_client_message('{"type": "set_params", "strength": -1}', max_bytes=LIMIT)


def test_set_params_becomes_session_controls():
    msg = parse_client_message(
        json.dumps({"type": "set_params", "id": 3, "strength": 0.25, "edits": {"smile": 0.5}, "face_sources": {"2": "grace"},
                    "keep_mouth": False}),
        max_bytes=LIMIT,
    )
    session = Session()
    controls = session.update(**params_to_controls(msg))
    assert controls.strength == 0.25 and controls.edits["smile"] == 0.5
    assert dict(controls.face_sources) == {2: "grace"} and controls.keep_mouth is False and controls.keep_eyes is True


def test_set_params_shape_sets_and_null_gives_back_the_server_s_default():
    session = Session()
    msg = parse_client_message('{"type": "set_params", "shape": 0.5}', max_bytes=LIMIT)
    assert session.update(**params_to_controls(msg)).shape == 0.5
    msg = parse_client_message('{"type": "set_params", "shape": 0}', max_bytes=LIMIT)     # an integer JSON number
    controls = session.update(**params_to_controls(msg))
    assert controls.shape == 0.0 and isinstance(controls.shape, float)
    for bad in ('1.5', '-0.1', '"x"', 'true'):
        with pytest.raises(ProtocolError) as err:
            parse_client_message('{"type": "set_params", "shape": %s, "id": 9}' % bad, max_bytes=LIMIT)
        assert err.value.code == "invalid" and "shape" in err.value.message and err.value.reply()["id"] == 9, bad
    assert session.controls.shape == 0.0                                                 # a refusal changes nothing
    msg = parse_client_message('{"type": "set_params", "shape": null}', max_bytes=LIMIT)
    assert session.update(**params_to_controls(msg)).shape is None                      # FusionConfig.shape_weight again
    assert session.controls.as_json()["shape"] is None


def test_set_params_colours_change_only_the_shades_named():
    session = Session()
    for colours in ({"lip_tint": "coral", "blush": "#FF9966"}, {"blush": None, "eye_makeup": "gold"}):
        msg = parse_client_message(json.dumps({"type": "set_params", "colours": colours}), max_bytes=LIMIT)
        controls = session.update(**params_to_controls(msg))
    assert dict(controls.colours) == {"lip_tint": "coral", "eye_makeup": "gold"}    # null took the blush's back


def test_good_messages_pass():
    assert parse_client_message('{"type": "ping", "t": 1.5}', max_bytes=LIMIT)["t"] == 1.5
    assert parse_client_message(b'{"type": "set_prompt", "text": "a slight smile"}', max_bytes=LIMIT)["text"] == "a slight smile"
    assert parse_client_message('{"type": "hello", "version": 1}', max_bytes=LIMIT)["version"] == 1


@pytest.mark.parametrize("raw", [
    '{"type": "set_params", "strength": NaN}',
    '{"type": "set_params", "strength": Infinity}',
    '{"type": "set_params", "strength": 1e999}',
    '{"type": "ping", "t": NaN}',
    '{"type": "ping", "t": -Infinity}',
    '{"type": "ping", "id": ' + "9" * 5000 + '}',
    '{"type": "hello", "id": 123456789012345678901234567890}',
])
def test_numbers_that_are_not_finite_or_too_long_are_refused_at_the_edge(raw):
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.parse_client_message(raw, max_bytes=64 * 1024)
    assert info.value.code == "invalid" and "number" in info.value.message


def test_replies_are_strict_json():
    assert protocol.dumps({"type": "pong", "t": 1.5}) == '{"type":"pong","t":1.5}'
    with pytest.raises(ValueError):
        protocol.dumps({"type": "pong", "t": float("nan")})


def test_an_encoded_event_goes_out_as_its_own_text_and_reads_as_its_fields():
    """A face event is encoded once by the rig's outputs: every transport sends that text, in-process
    listeners read its fields."""
    event = protocol.EncodedEvent("face", '{"t":0.5,"blendshapes":{"jawOpen":0.25}}')
    assert protocol.dumps(event) == event.text == '{"type":"face","t":0.5,"blendshapes":{"jawOpen":0.25}}'
    assert event["type"] == "face" and event.get("type") == "face" and "type" in event
    assert event["blendshapes"] == {"jawOpen": 0.25} and dict(event) == json.loads(event.text)


@pytest.mark.parametrize("sid", ["ünïcode", "٣٤٥", "a b", "", "x" * 65, "../etc"])
def test_source_ids_are_ascii_names(sid):
    with pytest.raises(ProtocolError) as err:
        parse_client_message(json.dumps({"type": "set_params", "source_id": sid}), max_bytes=4096)
    assert err.value.code == "invalid" and "source_id" in err.value.message
    with pytest.raises(ProtocolError):
        parse_client_message(json.dumps({"type": "set_params", "face_sources": {"1": sid}}), max_bytes=4096)


def test_a_plain_source_id_passes():
    msg = parse_client_message('{"type": "set_params", "source_id": "grace-hopper_2"}', max_bytes=4096)
    assert msg["source_id"] == "grace-hopper_2"


def test_unpaired_surrogates_are_refused_not_stored():
    with pytest.raises(ProtocolError, match="surrogate"):
        parse_client_message('{"type": "set_prompt", "text": "smile \\ud800"}', max_bytes=4096)
    ok = parse_client_message('{"type": "set_prompt", "text": "smile \\ud83d\\ude00"}', max_bytes=4096)
    assert ok["text"] == "smile \U0001F600"


def test_deep_nesting_is_bad_json_not_a_crash():
    with pytest.raises(ProtocolError) as err:
        parse_client_message("[" * 100_000 + "]" * 100_000, max_bytes=1 << 20)
    assert err.value.code == "bad_json"


def test_set_params_carries_a_fusion_mode():
    from streamer.session.protocol import ProtocolError, params_to_controls, parse_client_message

    msg = parse_client_message('{"type": "set_params", "fusion": "neural"}', max_bytes=1024)
    assert params_to_controls(msg) == {"fusion": "neural"}
    back = parse_client_message('{"type": "set_params", "fusion": null}', max_bytes=1024)
    assert params_to_controls(back) == {"fusion": None}
    import pytest

    with pytest.raises(ProtocolError, match="fusion"):
        parse_client_message('{"type": "set_params", "fusion": "diffusion"}', max_bytes=1024)
@pytest.mark.parametrize("kind", [[1] * 50, {"a": {"b": {}}}, 7, None, True])
def test_a_type_that_is_not_a_string_is_an_unknown_type_with_a_short_message(kind):
    with pytest.raises(ProtocolError) as err:
        parse_client_message(json.dumps({"type": kind, "text": "x"}), max_bytes=16384)
    assert err.value.code == "unknown_type" and len(err.value.message) < 200


def test_map_face_messages_are_checked_and_bounded():
    ok = parse_client_message('{"type": "map_face", "track_id": 3, "source_id": "keep", "id": 1}', max_bytes=4096)
    assert ok["track_id"] == 3 and ok["source_id"] == "keep"
    assert parse_client_message('{"type": "map_face", "track_id": 3, "source_id": null}', max_bytes=4096)["source_id"] is None
    for bad in ('{"type": "map_face", "track_id": -1, "source_id": "a"}',
                '{"type": "map_face", "track_id": 1000000, "source_id": "a"}',
                '{"type": "map_face", "track_id": "2", "source_id": "a"}',
                '{"type": "map_face", "track_id": 2}',
                '{"type": "map_face", "track_id": 2, "source_id": "../x"}',
                '{"type": "map_face", "track_id": 2, "source_id": "a", "extra": 1}'):
        with pytest.raises(ProtocolError) as err:
            parse_client_message(bad, max_bytes=4096)
        assert err.value.code == "invalid", bad
    many = {str(i): "keep" for i in range(17)}
    with pytest.raises(ProtocolError, match="face_sources"):
        parse_client_message(json.dumps({"type": "set_params", "face_sources": many}), max_bytes=4096)
