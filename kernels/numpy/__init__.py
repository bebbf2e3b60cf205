"""CPU twins of the pixel kernels (NumPy/OpenCV): the default path."""
