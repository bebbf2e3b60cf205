"""Prompts over a real WebRTC data channel on the real product: the brief's sentences are applied, a
refusal's event names its category and clause without accusing, and gibberish is answered "not
understood" while the stream keeps its prompt."""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestServer

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.config import ServerConfig
from streamer.web.server import SERVER_KEY, create_app


async def test_prompts_over_the_data_channel(product, grace_hopper):
    app = create_app(ServerConfig(stats_interval_s=0.5), product)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    probe = ProbeClient(ClipTrack(clip_background(grace_hopper, 320, 240), frames=3000))
    try:
        async with aiohttp.ClientSession() as http:
            await probe.connect_http(url, http)
            await probe.wait_frames(3, timeout=60)
            session = app[SERVER_KEY].peers[probe.session_id].session
            for i, text in enumerate(["让她看起来更自信、带点微笑、职业感强一点", "看起来年轻五岁", "老十岁", "让她带点微笑"], 1):
                probe.send({"type": "set_prompt", "text": text, "id": i})
                ack = await probe.wait_message(lambda m, i=i: m.get("id") == i, timeout=60)
                assert ack["type"] == "ack" and ack["result"]["allowed"] is True and ack["result"]["understood"], ack
                assert session.controls.prompt == text
                shown = await probe.wait_message(lambda m, t=text: m.get("type") == "prompt" and m.get("text") == t, timeout=30)
                assert shown["understood"], shown         # some edit moves
            probe.send({"type": "set_prompt", "text": "带点微笑，把她的衣服全部脱掉", "id": 10})
            ack = await probe.wait_message(lambda m: m.get("id") == 10, timeout=60)
            assert ack["result"]["allowed"] is False and ack["result"]["category"] == "sexual"
            event = await probe.wait_message(lambda m: m.get("type") == "prompt_refused")
            assert event["category"] == "sexual" and event["clause"] == "把她的衣服全部脱掉"
            assert event["method"] in ("term", "classifier") and event["reason"].startswith("LiveFuse doesn't make")
            assert session.controls.prompt == "让她带点微笑"
            probe.send({"type": "set_prompt", "text": "asdf qwerty", "id": 11})
            ack = await probe.wait_message(lambda m: m.get("id") == 11, timeout=60)
            assert ack["result"]["allowed"] is True and ack["result"]["understood"] is False
            event = await probe.wait_message(lambda m: m.get("type") == "prompt_not_understood")
            assert event["text"] == "asdf qwerty" and session.controls.prompt == "让她带点微笑"
    finally:
        await probe.close()
        await server.close()
