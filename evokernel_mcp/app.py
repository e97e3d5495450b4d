"""Process-wide services shared by the tools (job manager, runner pool), created lazily on first use
and closed by the server's lifespan. Nothing here does I/O at import time."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from evokernel_mcp.runtime.jobs import JobManager

log = logging.getLogger(__name__)


class App:
    def __init__(self) -> None:
        self._jobs: "JobManager | None" = None

    @property
    def jobs(self) -> "JobManager":
        if self._jobs is None:
            from evokernel_mcp.runtime.jobs import JobManager

            self._jobs = JobManager()
        return self._jobs

    async def aclose(self) -> None:
        if self._jobs is not None:
            log.info("shutting down job manager and runners")
            await self._jobs.aclose()
            self._jobs = None


_app: App | None = None


def get_app() -> App:
    global _app
    if _app is None:
        _app = App()
    return _app


async def close_app() -> None:
    global _app
    if _app is not None:
        await _app.aclose()
        _app = None
