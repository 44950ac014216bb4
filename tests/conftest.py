"""Hypothesis without its 200 ms deadline: on a shared two-core CI machine one slow call
(the collector, the other xdist worker) would fail a property that holds."""

from hypothesis import settings

settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")
