"""Is the compute any good: FLOPs and bytes of each framework op from its shapes, the GPU time of the kernels it
launched, achieved TFLOPS and TB/s against the device's roofline, MFU per step, and the findings that follow."""
