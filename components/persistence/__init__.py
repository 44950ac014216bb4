"""The functional PMEM: a byte image, a journal of persisted writes, per-system protocols.

The timing model says when each write enters the persistence domain; this package
keeps what was written, cuts it at a power-failure tick and runs each system's
recovery over the bytes that survived (see docs/failures.md).
"""
