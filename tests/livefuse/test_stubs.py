"""The committed stubs (livefuse/v1/) are what grpcio-tools makes of proto/livefuse/v1/fusion.proto now:
regenerated into a temporary folder and compared byte for byte but for the generator's own version stamps,
so an edit to the .proto without the regeneration (or an edit to a generated file) fails here, and a newer
grpcio-tools patch release in the pinned range does not."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO = "livefuse/v1/fusion.proto"
GENERATED = ("fusion_pb2.py", "fusion_pb2.pyi", "fusion_pb2_grpc.py")


# what names the generator rather than the proto: gRPC's and protobuf's versions, stamped into each stub (the
# stubs check at import that the installed runtimes are at least those), each with what stands in for it
_STAMPS = ((re.compile(r"^GRPC_GENERATED_VERSION = '[^']*'$", re.M), "GRPC_GENERATED_VERSION = <version>"),
           (re.compile(r"^# Protobuf Python Version: .*$", re.M), "# Protobuf Python Version: <version>"),
           (re.compile(r"(_runtime_version\.Domain\.PUBLIC,\n)\s+\d+,\n\s+\d+,\n\s+\d+,\n"), r"\1<version>\n"))


def _unstamped(text: str) -> str:
    for stamp, stand_in in _STAMPS:
        text = stamp.sub(stand_in, text)
    return text


def test_version_stamps_are_all_that_is_set_aside() -> None:
    grpc_stub = (ROOT / "livefuse" / "v1" / "fusion_pb2_grpc.py").read_text()
    assert _unstamped(grpc_stub.replace("'1.85.1'", "'1.85.4'")) == _unstamped(grpc_stub)
    assert _unstamped(grpc_stub.replace("def ", "def  ", 1)) != _unstamped(grpc_stub)
    pb2 = (ROOT / "livefuse" / "v1" / "fusion_pb2.py").read_text()
    assert "<version>" in _unstamped(pb2) and "ValidateProtobufRuntimeVersion" in _unstamped(pb2)


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    from grpc_tools import protoc

    rc = protoc.main(["grpc_tools.protoc", f"-I{ROOT / 'proto'}", f"--python_out={tmp_path}",
                      f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", str(ROOT / "proto" / PROTO)])
    assert rc == 0
    for name in GENERATED:
        fresh = (tmp_path / "livefuse" / "v1" / name).read_text()
        committed = (ROOT / "livefuse" / "v1" / name).read_text()
        assert _unstamped(committed) == _unstamped(fresh), f"livefuse/v1/{name} differs from the proto; regenerate (see {PROTO})"


def test_the_service_is_the_one_the_issue_names() -> None:
    from livefuse.v1 import fusion_pb2

    service = fusion_pb2.DESCRIPTOR.services_by_name["Fusion"]
    assert service.full_name == "livefuse.v1.Fusion"
    methods = {m.name: (m.client_streaming, m.server_streaming) for m in service.methods}
    assert methods == {"Fuse": (False, False), "CreateJob": (False, False), "GetJob": (False, False),
                       "CancelJob": (False, False), "WatchJob": (False, True), "DeleteResult": (False, False),
                       "FuseStream": (True, True)}
    fields = {f.name for f in fusion_pb2.FuseRequest.DESCRIPTOR.fields}
    assert {"source", "target", "prompt", "strength", "consent"} <= fields
    assert "image" in {f.name for f in fusion_pb2.FuseResponse.DESCRIPTOR.fields}
