"""gRPC beside REST: the livefuse.v1.Fusion service (proto/livefuse/v1/fusion.proto) on the same product,
tokens, limits, audit log and metrics as the /v1 routes, in the same process (`livefuse serve
--grpc-port`), with grpc.health.v1 following the server's readiness and server reflection."""
