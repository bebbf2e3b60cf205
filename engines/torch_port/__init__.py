"""Torch port of MediaPipe's face networks, built from the bundled .tflite files (no TensorFlow).

`tflite_graph` reads a .tflite flatbuffer with the `tflite` schema package and rebuilds its operators
as a torch module; `networks` wraps the detector and the landmarker with their pre- and post-processing.
"""
