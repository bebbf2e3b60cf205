from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ImageFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_FORMAT_UNSPECIFIED: _ClassVar[ImageFormat]
    IMAGE_FORMAT_PNG: _ClassVar[ImageFormat]
    IMAGE_FORMAT_JPEG: _ClassVar[ImageFormat]
    IMAGE_FORMAT_RAW_RGB: _ClassVar[ImageFormat]
IMAGE_FORMAT_UNSPECIFIED: ImageFormat
IMAGE_FORMAT_PNG: ImageFormat
IMAGE_FORMAT_JPEG: ImageFormat
IMAGE_FORMAT_RAW_RGB: ImageFormat

class FuseRequest(_message.Message):
    __slots__ = ("source", "target", "prompt", "strength", "consent", "edits", "face_map", "format", "background", "background_image", "colours", "shape")
    class EditsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ColoursEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    STRENGTH_FIELD_NUMBER: _ClassVar[int]
    CONSENT_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    FACE_MAP_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_IMAGE_FIELD_NUMBER: _ClassVar[int]
    COLOURS_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    source: bytes
    target: bytes
    prompt: str
    strength: float
    consent: bool
    edits: _containers.ScalarMap[str, float]
    face_map: str
    format: ImageFormat
    background: str
    background_image: bytes
    colours: _containers.ScalarMap[str, str]
    shape: float
    def __init__(self, source: _Optional[bytes] = ..., target: _Optional[bytes] = ..., prompt: _Optional[str] = ..., strength: _Optional[float] = ..., consent: _Optional[bool] = ..., edits: _Optional[_Mapping[str, float]] = ..., face_map: _Optional[str] = ..., format: _Optional[_Union[ImageFormat, str]] = ..., background: _Optional[str] = ..., background_image: _Optional[bytes] = ..., colours: _Optional[_Mapping[str, str]] = ..., shape: _Optional[float] = ...) -> None: ...

class FuseResponse(_message.Message):
    __slots__ = ("image", "media_type", "request_id", "watermark", "faces", "fused", "edits", "timings_ms")
    class EditsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class TimingsMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    FACES_FIELD_NUMBER: _ClassVar[int]
    FUSED_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_MS_FIELD_NUMBER: _ClassVar[int]
    image: bytes
    media_type: str
    request_id: str
    watermark: str
    faces: int
    fused: int
    edits: _containers.ScalarMap[str, float]
    timings_ms: _containers.ScalarMap[str, float]
    def __init__(self, image: _Optional[bytes] = ..., media_type: _Optional[str] = ..., request_id: _Optional[str] = ..., watermark: _Optional[str] = ..., faces: _Optional[int] = ..., fused: _Optional[int] = ..., edits: _Optional[_Mapping[str, float]] = ..., timings_ms: _Optional[_Mapping[str, float]] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ("source", "clip", "target_url", "clip_type", "prompt", "strength", "consent")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CLIP_FIELD_NUMBER: _ClassVar[int]
    TARGET_URL_FIELD_NUMBER: _ClassVar[int]
    CLIP_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    STRENGTH_FIELD_NUMBER: _ClassVar[int]
    CONSENT_FIELD_NUMBER: _ClassVar[int]
    source: bytes
    clip: bytes
    target_url: str
    clip_type: str
    prompt: str
    strength: float
    consent: bool
    def __init__(self, source: _Optional[bytes] = ..., clip: _Optional[bytes] = ..., target_url: _Optional[str] = ..., clip_type: _Optional[str] = ..., prompt: _Optional[str] = ..., strength: _Optional[float] = ..., consent: _Optional[bool] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteResultRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "state", "frames_done", "frames_total", "error", "result_url", "created", "updated")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Job.State]
        QUEUED: _ClassVar[Job.State]
        RUNNING: _ClassVar[Job.State]
        DONE: _ClassVar[Job.State]
        FAILED: _ClassVar[Job.State]
        CANCELLED: _ClassVar[Job.State]
    STATE_UNSPECIFIED: Job.State
    QUEUED: Job.State
    RUNNING: Job.State
    DONE: Job.State
    FAILED: Job.State
    CANCELLED: Job.State
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FRAMES_DONE_FIELD_NUMBER: _ClassVar[int]
    FRAMES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_URL_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: Job.State
    frames_done: int
    frames_total: int
    error: str
    result_url: str
    created: float
    updated: float
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[Job.State, str]] = ..., frames_done: _Optional[int] = ..., frames_total: _Optional[int] = ..., error: _Optional[str] = ..., result_url: _Optional[str] = ..., created: _Optional[float] = ..., updated: _Optional[float] = ...) -> None: ...

class Controls(_message.Message):
    __slots__ = ("strength", "prompt", "edits", "set_edits", "colours", "shape")
    class EditsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ColoursEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STRENGTH_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    SET_EDITS_FIELD_NUMBER: _ClassVar[int]
    COLOURS_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    strength: float
    prompt: str
    edits: _containers.ScalarMap[str, float]
    set_edits: bool
    colours: _containers.ScalarMap[str, str]
    shape: float
    def __init__(self, strength: _Optional[float] = ..., prompt: _Optional[str] = ..., edits: _Optional[_Mapping[str, float]] = ..., set_edits: _Optional[bool] = ..., colours: _Optional[_Mapping[str, str]] = ..., shape: _Optional[float] = ...) -> None: ...

class StreamStart(_message.Message):
    __slots__ = ("source", "consent", "controls", "format")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONSENT_FIELD_NUMBER: _ClassVar[int]
    CONTROLS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    source: bytes
    consent: bool
    controls: Controls
    format: ImageFormat
    def __init__(self, source: _Optional[bytes] = ..., consent: _Optional[bool] = ..., controls: _Optional[_Union[Controls, _Mapping]] = ..., format: _Optional[_Union[ImageFormat, str]] = ...) -> None: ...

class RawImage(_message.Message):
    __slots__ = ("width", "height", "rgb")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    RGB_FIELD_NUMBER: _ClassVar[int]
    width: int
    height: int
    rgb: bytes
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., rgb: _Optional[bytes] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("seq", "encoded", "raw")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    seq: int
    encoded: bytes
    raw: RawImage
    def __init__(self, seq: _Optional[int] = ..., encoded: _Optional[bytes] = ..., raw: _Optional[_Union[RawImage, _Mapping]] = ...) -> None: ...

class StreamRequest(_message.Message):
    __slots__ = ("start", "frame", "controls")
    START_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    CONTROLS_FIELD_NUMBER: _ClassVar[int]
    start: StreamStart
    frame: Frame
    controls: Controls
    def __init__(self, start: _Optional[_Union[StreamStart, _Mapping]] = ..., frame: _Optional[_Union[Frame, _Mapping]] = ..., controls: _Optional[_Union[Controls, _Mapping]] = ...) -> None: ...

class FusedFrame(_message.Message):
    __slots__ = ("seq", "encoded", "raw", "media_type", "faces", "watermark", "skipped", "timings_ms", "error")
    class TimingsMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    FACES_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    seq: int
    encoded: bytes
    raw: RawImage
    media_type: str
    faces: int
    watermark: str
    skipped: int
    timings_ms: _containers.ScalarMap[str, float]
    error: str
    def __init__(self, seq: _Optional[int] = ..., encoded: _Optional[bytes] = ..., raw: _Optional[_Union[RawImage, _Mapping]] = ..., media_type: _Optional[str] = ..., faces: _Optional[int] = ..., watermark: _Optional[str] = ..., skipped: _Optional[int] = ..., timings_ms: _Optional[_Mapping[str, float]] = ..., error: _Optional[str] = ...) -> None: ...
