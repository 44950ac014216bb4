"""matplotlib for writing PNG files, whatever the environment says.

Every plot here is a file written with the Agg backend, so $MPLBACKEND has no use; but
matplotlib validates it on import and raises deep inside a run that has finished its
work. ``check_backend`` refuses an unusable value up front (entry points call it before
any work when they will plot); ``pyplot`` imports with Agg either way.
"""

from __future__ import annotations

import os

from components.sim.params import ConfigError

ENV = "MPLBACKEND"


def check_backend() -> None:
    """Raise ConfigError naming $MPLBACKEND when matplotlib would refuse it."""
    value = os.environ.get(ENV)
    if value is None:
        return
    saved = os.environ.pop(ENV)
    try:
        from matplotlib import rcsetup

        rcsetup.validate_backend(value)
    except (ValueError, TypeError):
        raise ConfigError(
            f"{ENV}={value!r} is not a matplotlib backend; plots are written as PNG "
            f"files with Agg, so unset {ENV} (or set it to agg)"
        ) from None
    finally:
        os.environ[ENV] = saved


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    check_backend()
    os.environ.pop(ENV, None)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
