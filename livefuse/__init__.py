"""LiveFuse for callers: `livefuse.client` (sync and async, over gRPC or REST) and `livefuse.v1`, the
stubs generated from proto/livefuse/v1/fusion.proto. It imports nothing of the server (streamer, engines,
kernels): a service that calls LiveFuse installs the same package and uses only this part."""
