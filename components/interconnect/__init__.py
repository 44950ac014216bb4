"""Interconnect models: serial links, CXL (links, switch, sub-protocols), PCIe + CUDA path."""
