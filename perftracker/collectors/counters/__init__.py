"""Host counters: RDMA/sysfs, ethtool, NVML/nvidia-smi samples, Prometheus text."""
