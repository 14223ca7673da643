"""Shared test configuration: hypothesis profiles, and CI's rule that optional-stack tests must not skip."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# "ci" runs 600 examples per property; "dev" keeps local runs quick. CI=true selects "ci". (2000 examples per
# property took the main CI stage past 20 minutes of pytest once the suite had grown to 140 properties; at 1000, the
# whole CI run measured 1995 s on a shared 2-core machine, past its 30-minute budget, once the suite had grown to
# 13,971 tests across four stages. The other three stages run "dev".)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.register_profile(
    "ci", max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

_REQUIRED = {s.strip() for s in os.environ.get("R3WIRE_REQUIRE", "").split(",") if s.strip()}
_forbidden_skips: list[str] = []


def _record(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not report.skipped or not _REQUIRED:
        return
    reason = str(report.longrepr)
    if any(name in reason for name in _REQUIRED):
        _forbidden_skips.append(f"{report.nodeid}: {reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _record(report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _forbidden_skips:
        lines = "\n  ".join(_forbidden_skips)
        print(f"\nR3WIRE_REQUIRE={','.join(sorted(_REQUIRED))} but these tests skipped:\n  {lines}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
