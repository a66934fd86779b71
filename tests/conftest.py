# SPDX-License-Identifier: GPL-2.0-only
import os

from hypothesis import HealthCheck, settings

# CI runs at least 200 examples per property (issue #2); local runs are quicker.
settings.register_profile("ci", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
