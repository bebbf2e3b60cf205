"""The media path of one stream: the newest decoded frame waits in a slot, a worker runs the pipeline on
it, and tracks hand the newest processed frame to whoever pulls (encoders, viewers, sinks)."""
