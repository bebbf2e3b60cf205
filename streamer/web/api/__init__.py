"""The REST front door beside the live streams: photos (`POST /v1/fuse`), clip jobs (`/v1/jobs`) and the
OpenAPI description, on the same pipeline, safety kit and limits as live sessions."""
