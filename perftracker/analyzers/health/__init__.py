"""Host health: RDMA ports, RoCE flow control, GPUs, NVLink/PCIe, topology, bandwidth."""
