"""A fake VTube Studio for the tests: a real WebSocket server that follows VTS's published plugin API
(github.com/DenchiSoft/VTubeStudio: the message envelope, AuthenticationTokenRequest / AuthenticationRequest
/ InjectParameterDataRequest, APIError with its ErrorIDs) for the requests the LiveFuse client makes."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

API = "VTubeStudioPublicAPI"
DEFAULT_INPUTS = {"FacePositionX", "FacePositionY", "FacePositionZ", "FaceAngleX", "FaceAngleY", "FaceAngleZ",
                  "MouthSmile", "MouthOpen", "Brows", "TongueOut", "EyeOpenLeft", "EyeOpenRight", "EyeLeftX",
                  "EyeLeftY", "EyeRightX", "EyeRightY", "CheekPuff", "FaceAngry", "BrowLeftY", "BrowRightY",
                  "MouseX", "MouseY", "VoiceFrequency", "VoiceVolume", "VoiceVolumePlusMouthOpen",
                  "VoiceFrequencyPlusMouthSmile", "MouthX"}
# ErrorID.cs
JSON_INVALID, API_NAME_INVALID, REQUEST_ID_INVALID, TYPE_UNKNOWN, NEEDS_AUTH = 2, 3, 5, 7, 8
TOKEN_DENIED, TOKEN_MISSING = 50, 100
INJECT_VALUE_INVALID, INJECT_PARAM_NOT_FOUND, INJECT_MODE_UNKNOWN = 451, 453, 455


@dataclass
class VtsApp:
    """What persists across the app's restarts: the tokens the user allowed, and whether they deny."""

    deny: bool = False
    tokens: set[str] = field(default_factory=set)
    token_requests: int = 0
    auth_requests: int = 0
    injects: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)


class FakeVts:
    def __init__(self, app: VtsApp, port: int = 0) -> None:
        self.app = app
        self.port = port
        self._server: Any = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> "FakeVts":
        from websockets.asyncio.server import serve

        self._server = await serve(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """The app quits: the listening socket and every connection close."""
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, ws: Any) -> None:
        authed = False
        async for raw in ws:
            try:
                msg = json.loads(raw)
            except ValueError:
                await ws.send(self._error(None, JSON_INVALID, "invalid JSON"))
                continue
            rid = msg.get("requestID")
            if msg.get("apiName") != API or msg.get("apiVersion") != "1.0":
                await ws.send(self._error(rid, API_NAME_INVALID, "apiName or apiVersion invalid"))
                continue
            if rid is not None and (not isinstance(rid, str) or len(rid) > 64):
                await ws.send(self._error(None, REQUEST_ID_INVALID, "requestID invalid"))
                continue
            kind, data = msg.get("messageType"), msg.get("data") or {}
            if kind == "AuthenticationTokenRequest":
                self.app.token_requests += 1
                if self.app.deny:
                    await ws.send(self._error(rid, TOKEN_DENIED, "User has denied API access for your plugin."))
                    continue
                token = secrets.token_hex(32)
                self.app.tokens.add(token)
                await ws.send(self._reply(rid, "AuthenticationTokenResponse", {"authenticationToken": token}))
            elif kind == "AuthenticationRequest":
                self.app.auth_requests += 1
                if not data.get("authenticationToken"):
                    await ws.send(self._error(rid, TOKEN_MISSING, "authenticationToken missing"))
                    continue
                authed = data["authenticationToken"] in self.app.tokens
                await ws.send(self._reply(rid, "AuthenticationResponse", {
                    "authenticated": authed, "reason": "Token valid." if authed else "Token invalid or revoked."}))
            elif kind == "InjectParameterDataRequest":
                if not authed:
                    await ws.send(self._error(rid, NEEDS_AUTH, "This request requires authentication."))
                    continue
                code = self._check_inject(data)
                if code:
                    await ws.send(self._error(rid, code, "bad parameter data"))
                    continue
                self.app.injects.append((time.monotonic(), data))
                await ws.send(self._reply(rid, "InjectParameterDataResponse", {}))
            else:
                await ws.send(self._error(rid, TYPE_UNKNOWN, f"unknown messageType {kind!r}"))

    def _check_inject(self, data: dict[str, Any]) -> int:
        if data.get("mode", "set") not in ("set", "add"):
            return INJECT_MODE_UNKNOWN
        values = data.get("parameterValues")
        if not isinstance(values, list) or not values:
            return INJECT_VALUE_INVALID
        for v in values:
            if v.get("id") not in DEFAULT_INPUTS:
                return INJECT_PARAM_NOT_FOUND
            if not isinstance(v.get("value"), (int, float)) or not (-1000000 <= v["value"] <= 1000000):
                return INJECT_VALUE_INVALID
        return 0

    def _reply(self, rid: str | None, kind: str, data: dict[str, Any]) -> str:
        return json.dumps({"apiName": API, "apiVersion": "1.0", "timestamp": int(time.time() * 1000),
                           "requestID": rid, "messageType": kind, "data": data})

    def _error(self, rid: str | None, code: int, message: str) -> str:
        self.app.errors.append(code)
        return self._reply(rid, "APIError", {"errorID": code, "message": message})
