"""The API's OpenAPI 3.1 description, written as data (served at GET /v1/openapi.json). A test checks it
against the OpenAPI 3.1 schema and that it names every /v1 route the app serves, and no other."""

from __future__ import annotations

from typing import Any

from engines.edit_vocabulary import COLOURED, EDIT_SPECS
from engines.prompt.language import MAX_PROMPT_CHARS
from streamer.session.protocol import OUTPUTS_SCHEMA, SHADE_SCHEMA

ERROR = {"$ref": "#/components/schemas/Error"}
# a form part's name: plain ASCII (a name outside it may reach the server as bytes another name also
# encodes to); each part is sent once
FIELD_NAME = {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"}
ONCE = {"not": {"type": "array"}}   # a field the API does not read is ignored, but sent once like every other


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}


def _common_errors() -> dict[str, Any]:
    return {
        "401": _error("no token, or one that is unknown, expired or revoked (code unauthorized)"),
        "403": _error("the request's Origin is not one this server admits (code origin_not_allowed)"),
        "421": _error("the Host header names no name this server answers to (code misdirected_request)"),
        "429": _error("rate limit exceeded (code rate_limited; Retry-After says when to try again)"),
    }


def _upload_errors(files: str) -> dict[str, Any]:
    """What the one multipart reader (streamer/web/multipart.py) and the upload counts answer on an upload route."""
    return {
        "400": _error("a malformed form: bad_multipart (no or a bad boundary, a part header over 8 KiB or more than 16 "
                      "of them, a control byte or NUL in a header or filename, a body that ends before its closing "
                      "boundary), incomplete_body (the client went away), repeated_part (a part sent twice), "
                      "bad_field (a field that is not UTF-8), bad_request (a missing part, a bad strength or edits), "
                      f"prompt_too_long (over {MAX_PROMPT_CHARS} characters)"),
        "408": _error("the body stalled (read_timeout) or arrived under the minimum rate (too_slow); the connection closes"),
        "413": _error(f"over a limit: {files}, field_too_large, too_many_parts, or too_large (the declared body); "
                      "an image over the pixel limit is <part>_too_large too"),
        "415": _error("not multipart/form-data, or a file part of another type (code unsupported_media_type)"),
    }


def openapi(*, jobs: bool = True, version: str = "1") -> dict[str, Any]:
    """The description of the routes mounted (`jobs`: the clip-job routes are mounted too)."""
    paths: dict[str, Any] = {
        "/v1/fuse": {"post": {
            "operationId": "fusePhoto",
            "summary": "Fuse the source face into every face of the target photo; the result is watermarked",
            "requestBody": {"required": True, "content": {"multipart/form-data": {
                "schema": {"$ref": "#/components/schemas/FuseForm"},
                "encoding": {"source": {"contentType": "image/jpeg, image/png, image/webp"},
                             "target": {"contentType": "image/jpeg, image/png, image/webp"},
                             "background_image": {"contentType": "image/jpeg, image/png, image/webp"},
                             "edits": {"contentType": "application/json"},
                             "colours": {"contentType": "application/json"}}}}},
            "parameters": [{"name": "Accept", "in": "header", "required": False,
                            "schema": {"type": "string", "default": "image/png",
                                       "enum": ["image/png", "image/jpeg", "image/*", "*/*"]},
                            "description": "image/png (the default) or image/jpeg; a list with q-values is read as "
                                           "HTTP says (e.g. `image/jpeg, image/png;q=0.5`)"}],
            "responses": {
                "200": {"description": "the fused, watermarked photo",
                        "headers": {
                            "X-LiveFuse-Watermark": {"description": "the 64-bit watermark payload the image carries, 16 hex digits",
                                                     "schema": {"type": "string", "pattern": "^[0-9a-f]{16}$"}},
                            "X-LiveFuse-Audit-Record": {"description": "the request id the audit log's records of this request carry (data.request / data.session)",
                                                        "schema": {"type": "string"}},
                            "X-LiveFuse-Faces": {"description": "faces found in the target / fused", "schema": {"type": "string"}},
                            "Server-Timing": {"description": "ms per step", "schema": {"type": "string"}}},
                        "content": {"image/png": {"schema": {"type": "string", "contentMediaType": "image/png"}},
                                    "image/jpeg": {"schema": {"type": "string", "contentMediaType": "image/jpeg"}}}},
                **_upload_errors("source_too_large, target_too_large"),
                **_common_errors(),
                "406": _error("Accept names neither image/png nor image/jpeg (code not_acceptable)"),
                "422": _error("refused: map_bad_index, source_no_consent, source_no_face, source_too_small, source_too_turned, "
                              "source_occluded, source_bad_image, source_protected_identity, target_no_face, "
                              "target_bad_image, background_image_bad_image, prompt_refused (with its category, the clause that decided and method: term, pattern or classifier), prompt_not_understood"),
                "500": _error("a pipeline step failed (code <stage>_failed); no unmarked image is ever returned"),
                "503": _error("busy, with Retry-After: upload bodies in transfer (uploads_busy), photos in progress or the "
                              "memory budget for images in flight (busy, source_busy, target_busy); or prompt_unavailable"),
            }}},
        "/v1/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This description",
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {"type": "object"}}}},
                          **_common_errors()}}},
    }
    session_id = {"name": "session", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 64}}
    outputs_state = {"application/json": {"schema": {"$ref": "#/components/schemas/SessionOutputs"}}}
    paths["/v1/sessions/{session}/outputs"] = {
        "get": {"operationId": "getSessionOutputs", "summary": "A live session's avatar and face-data outputs and their state",
                "parameters": [session_id],
                "responses": {"200": {"description": "what the session asks for, each output's state", "content": outputs_state},
                              **_common_errors(), "404": _error("no such session for this token")}},
        "post": {"operationId": "setSessionOutputs",
                 "summary": "Turn a live session's VMC, VTube Studio and face events on or off, start a neutral calibration",
                 "description": "The control protocol's set_params names (docs/api.md, Face events; docs/vtuber.md): "
                                "keys left out of outputs keep their value, null turns an output off. A session points "
                                "outputs at loopback or the address it connects from.",
                 "parameters": [session_id],
                 "requestBody": {"required": True, "content": {"application/json": {
                     "schema": {"$ref": "#/components/schemas/SessionOutputsChange"}}}},
                 "responses": {"200": {"description": "the outputs after the change", "content": outputs_state},
                               "400": _error("not JSON (bad_json), or not the schema (invalid)"),
                               **_common_errors(),
                               "403": _error("an output pointed away from the client's machine (output_refused), or the "
                                             "request's Origin is not admitted (origin_not_allowed)"),
                               "404": _error("no such session for this token"),
                               "408": _error("the body stalled or arrived too slowly (read_timeout, too_slow)"),
                               "409": _error("this server's pipeline has no face-out stage (no_face_outputs)"),
                               "413": _error("the body is over 16 KiB (too_large)"),
                               "415": _error("not application/json (unsupported_media_type)")}}}
    if jobs:
        job_id = {"name": "job", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"}}
        job = {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}
        paths["/v1/jobs"] = {"post": {
            "operationId": "createJob", "summary": "Fuse the source face into a clip, in the background",
            "requestBody": {"required": True, "content": {"multipart/form-data": {
                "schema": {"$ref": "#/components/schemas/JobForm"}}}},
            "responses": {"202": {"description": "accepted; poll Location or follow its events", "content": job,
                                  "headers": {"Location": {"schema": {"type": "string"}}},
                                  "links": {op: {"operationId": op, "parameters": {"job": "$response.body#/id"}}
                                            for op in ("getJob", "cancelJob", "jobEvents", "jobResult")}},
                          **_upload_errors("source_too_large, target_too_large (the clip's bytes, or its frames "
                                           "over the photos' pixel limit)"),
                          **_common_errors(),
                          "403": _error("the request's Origin is not admitted (origin_not_allowed), or target_url is not "
                                        "on this server's input allowlist (input_not_allowed)"),
                          "422": _error("the source face or prompt is refused (codes as for /v1/fuse), or the clip is "
                                        "not one this server reads (target_bad_clip)"),
                          "503": _error("the job queue is full (queue_full) or unreachable (queue_unavailable), upload "
                                        "bodies in transfer (uploads_busy) or the memory budget (busy, source_busy); "
                                        "with Retry-After")}}}
        paths["/v1/jobs/{job}"] = {
            "get": {"operationId": "getJob", "summary": "A job's state and progress", "parameters": [job_id],
                    "responses": {"200": {"description": "the job", "content": job}, **_common_errors(),
                                  "404": _error("no such job for this token")}},
            "delete": {"operationId": "cancelJob", "summary": "Cancel a queued or running job", "parameters": [job_id],
                       "responses": {"200": {"description": "the job, now cancelled (or already finished)", "content": job},
                                     **_common_errors(), "404": _error("no such job for this token")}}}
        paths["/v1/jobs/{job}/result"] = {"get": {
            "operationId": "jobResult", "summary": "The result: the file (a local results folder) or a redirect to its presigned URL",
            "parameters": [job_id],
            "responses": {"200": {"description": "the fused clip", "content": {"video/*": {"schema": {"type": "string"}}}},
                          "302": {"description": "to the presigned URL of the result in object storage"},
                          **_common_errors(), "404": _error("no such job for this token"),
                          "409": _error("the job has no result (yet)")}},
            "delete": {
                "operationId": "deleteJobResult",
                "summary": "Delete the result from the store and PURGE it from the cache edge; the job stays, with no result",
                "parameters": [job_id],
                "responses": {"200": {"description": "the job, its result_url null", "content": job}, **_common_errors(),
                              "404": _error("no such job for this token, or it has no result")}}}
        paths["/v1/jobs/{job}/events"] = {"get": {
            "operationId": "jobEvents", "summary": "Server-Sent Events: the job's state and progress as it runs",
            "parameters": [job_id],
            "responses": {"200": {"description": "an event stream; each event's data is the Job; it ends when the job does",
                                  "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                          **_common_errors(), "404": _error("no such job for this token")}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "LiveFuse API", "version": version,
                 "description": "Face fusion for photos and clips on the live pipeline: consent, policy, "
                                "protected identities, watermark and audit apply exactly as for live sessions."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "a token from `livefuse tokens issue` (not needed on an open loopback server)"}},
            "schemas": {
                "SessionOutputsChange": {
                    "type": "object", "additionalProperties": False, "minProperties": 1,
                    "properties": {"outputs": OUTPUTS_SCHEMA, "calibrate": {"const": True},
                                   "face_neutral": {"anyOf": [{"type": "object", "maxProperties": 8}, {"type": "null"}]}}},
                "SessionOutputs": {
                    "type": "object", "required": ["session", "outputs", "calibration", "state"],
                    "properties": {"session": {"type": "string"}, "outputs": {"type": "object"},
                                   "calibration": {"type": "integer"}, "state": {"type": "object"}}},
                "Error": {"type": "object", "required": ["error", "code"],
                          "properties": {"error": {"type": "string"}, "code": {"type": "string"},
                                         "category": {"type": "string"}}},
                "Edits": {"type": "object", "additionalProperties": False,
                          "description": "slider edits, the part's text a JSON object, e.g. {\"smile\": 0.4}",
                          "properties": {s.name: {"type": "number", "minimum": s.low, "maximum": s.high} for s in EDIT_SPECS}},
                "Colours": {"type": "object", "additionalProperties": False,
                            "description": "the makeup's shades, the part's text a JSON object, e.g. {\"lip_tint\": \"coral\"}: "
                                           "a palette name or #rrggbb per coloured edit (a colour word in the prompt does the same)",
                            "properties": {n: SHADE_SCHEMA for n in COLOURED}},
                "FuseForm": {"type": "object", "required": ["source", "target", "consent"], "propertyNames": FIELD_NAME, "additionalProperties": ONCE,
                             "properties": {
                    "source": {"type": "string", "contentMediaType": "image/*", "description": "the face to fuse in"},
                    "target": {"type": "string", "contentMediaType": "image/*", "description": "the photo to fuse it into"},
                    "consent": {"type": "string", "enum": ["true", "1", "yes", "on"],
                                "description": "you confirm you may use the source face (recorded)"},
                    "prompt": {"type": "string", "maxLength": MAX_PROMPT_CHARS, "description": "edits in words, e.g. 'a slight smile'"},
                    "strength": {"type": "number", "minimum": 0, "maximum": 1, "default": 1},
                    "shape": {"type": "number", "minimum": 0, "maximum": 1,
                              "description": "how far the face's proportions (eyes, brows, nose) move toward the "
                                             "source's: 0 keeps the target's shape and changes its skin alone; "
                                             "unset, the server's default (0.4; docs/fusion.md)"},
                    "enhance": {"type": "number", "minimum": 0, "maximum": 1, "default": 1,
                                "description": "the face enhancer's strength, where the server runs one (--enhancer; "
                                               "docs/models.md); ignored otherwise"},
                    "edits": {"$ref": "#/components/schemas/Edits"},
                    "colours": {"$ref": "#/components/schemas/Colours"},
                    "background": {"type": "string", "maxLength": 64,
                                   "description": "behind the person: 'blur', a CSS colour ('#00ff00', 'lime', "
                                                  "'rgb(0,0,255)') or 'none'; 'image' (or nothing) with a "
                                                  "background_image part; a bad one is 400 bad_background"},
                    "background_image": {"type": "string", "contentMediaType": "image/*",
                                         "description": "a picture put behind the person, scaled to cover the photo"},
                    "map": {"type": "string", "pattern": "^\\s*[0-9]{1,6}\\s*=\\s*(source|keep)\\s*(,\\s*[0-9]{1,6}\\s*=\\s*(source|keep)\\s*){0,15}$",
                            "description": "per-face choice by face index in reading order (0 = leftmost): "
                                           "'source' or 'keep' (left unchanged), e.g. 0=keep,1=source; faces not "
                                           "named get the source"}}},
                "JobForm": {"type": "object", "required": ["source", "consent"], "propertyNames": FIELD_NAME, "additionalProperties": ONCE,
                            "oneOf": [{"required": ["target"]}, {"required": ["target_url"]}], "properties": {
                    "source": {"type": "string", "contentMediaType": "image/*"},
                    "target": {"type": "string", "contentMediaType": "video/*", "description": "the clip (mp4, mkv, mov, webm)"},
                    "target_url": {"type": "string", "minLength": 1, "description": "instead of `target`: an s3:// or https:// URL the "
                                   "server reads, if its input allowlist admits it (redirects are not followed)"},
                    "consent": {"type": "string", "enum": ["true", "1", "yes", "on"]},
                    "prompt": {"type": "string", "maxLength": MAX_PROMPT_CHARS},
                    "strength": {"type": "number", "minimum": 0, "maximum": 1, "default": 1}}},
                "Job": {"type": "object", "required": ["id", "state", "frames_done"], "properties": {
                    "id": {"type": "string"},
                    "state": {"type": "string", "enum": ["queued", "running", "done", "failed", "cancelled"]},
                    "frames_done": {"type": "integer", "minimum": 0},
                    "frames_total": {"type": ["integer", "null"], "minimum": 0},
                    "error": {"type": ["string", "null"]},
                    "result_url": {"type": ["string", "null"], "description": "a presigned GET URL of the result once done"},
                    "created": {"type": "number"}, "updated": {"type": "number"}}},
            },
        },
    }
