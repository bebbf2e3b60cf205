"""torch twins of the pixel kernels: same names and results as kernels.numpy, on any device."""
