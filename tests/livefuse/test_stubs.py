"""The committed stubs (livefuse/v1/) are what grpcio-tools makes of proto/livefuse/v1/fusion.proto now:
regenerated into a temporary folder and compared byte for byte, so an edit to the .proto without the
regeneration (or an edit to a generated file) fails here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO = "livefuse/v1/fusion.proto"
GENERATED = ("fusion_pb2.py", "fusion_pb2.pyi", "fusion_pb2_grpc.py")


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    from grpc_tools import protoc

    rc = protoc.main(["grpc_tools.protoc", f"-I{ROOT / 'proto'}", f"--python_out={tmp_path}",
                      f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", str(ROOT / "proto" / PROTO)])
    assert rc == 0
    for name in GENERATED:
        fresh = (tmp_path / "livefuse" / "v1" / name).read_text()
        committed = (ROOT / "livefuse" / "v1" / name).read_text()
        assert committed == fresh, f"livefuse/v1/{name} differs from the proto; regenerate (see {PROTO})"


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
