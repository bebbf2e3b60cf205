"""Ways to steer a running session besides its data channel; each speaks `streamer.protocol`."""
