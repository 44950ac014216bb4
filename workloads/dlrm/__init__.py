"""Numpy DLRM (facebookresearch/dlrm semantics) split into interleavable step pieces."""

from workloads.dlrm.model import DLRM, Grads

__all__ = ["DLRM", "Grads"]
