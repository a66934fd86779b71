# SPDX-License-Identifier: GPL-2.0-only
import glob
import os

from hypothesis import HealthCheck, settings

# CI runs at least 200 examples per property (issue #2); local runs are quicker.
settings.register_profile("ci", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


# Clusters keep their logs after ``emu down`` (/run/emu/logs: a user's post-mortem); a test
# run left ~130 such files each time. The names the tests draw (``random_cluster``) are
# recorded, and once the session ends the logs of every cluster that is down and whose name
# starts with one of them (the interop runner and some tests derive names from a drawn
# prefix) go — nobody else's.
from emu.fabric import naming as _naming  # noqa: E402

_drawn: set[str] = set()
_random_cluster = _naming.random_cluster


def _recorded_random_cluster(prefix: str = "t") -> str:
    name = _random_cluster(prefix)
    _drawn.add(name)
    return name


_naming.random_cluster = _recorded_random_cluster


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest's hook signature
    from emu.fabric import state

    logs = os.path.join(state.STATE_DIR, "logs")
    for name in _drawn:
        for path in glob.glob(os.path.join(logs, glob.escape(name) + "*")):
            cluster = os.path.basename(path).split(".", 1)[0]
            if state.load(cluster) is None:
                try:
                    os.unlink(path)
                except OSError:
                    pass
