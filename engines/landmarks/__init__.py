"""MediaPipe's face networks as LiveFuse runs them: the bundled .tflite files read without TensorFlow
(`tflite_graph` rebuilds their operators as torch modules), the networks with their pre- and
post-processing (`networks`), the tracking graph that drives them in any runtime (`graph`: torch,
LiteRT's interpreter, TensorRT plug in as runners) and MediaPipe's face geometry (`geometry`).
"""
