"""What a power failure does: injection, recovery, the oracle, crash exploration."""
