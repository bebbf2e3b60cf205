"""Pixel maths. Each op has a NumPy/OpenCV twin (the CPU default) and a torch twin (any device)."""
