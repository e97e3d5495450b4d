"""Domain errors. All derive from ToolError so the agent reads their message (what failed, what to do)."""

from __future__ import annotations

from mcp.server.mcpserver.exceptions import ToolError


class EvoError(ToolError):
    """Base of our errors: the message is written for the agent and says what to do."""


class BadInput(EvoError):
    """The arguments are wrong in a way the schema cannot express."""


class ToolNotFound(EvoError):
    def __init__(self, tool: str, searched: list[str] | None = None, env_var: str | None = None, hint: str = ""):
        self.tool, self.searched, self.env_var = tool, searched or [], env_var
        where = f" (searched: {', '.join(self.searched)})" if self.searched else ""
        env = f"; set {env_var} to its path" if env_var else ""
        super().__init__(f"{tool} not found{where}{env}. {hint}".strip())


class ToolTimeout(EvoError):
    def __init__(self, tool: str, timeout_s: float, stderr_tail: str = ""):
        self.tool, self.timeout_s, self.stderr_tail = tool, timeout_s, stderr_tail
        tail = f"\nstderr tail:\n{stderr_tail}" if stderr_tail else ""
        super().__init__(f"{tool} did not finish within {timeout_s:g} s and was killed.{tail}")


class ToolFailed(EvoError):
    def __init__(self, tool: str, returncode: int, stderr_tail: str = ""):
        self.tool, self.returncode, self.stderr_tail = tool, returncode, stderr_tail
        tail = f"\nstderr tail:\n{stderr_tail}" if stderr_tail else ""
        super().__init__(f"{tool} failed with exit code {returncode}.{tail}")


class ParseError(EvoError):
    def __init__(self, tool: str, where: str, version: str | None = None, message: str = ""):
        self.tool, self.where, self.version = tool, where, version
        ver = f" {version}" if version else ""
        super().__init__(f"could not parse {tool}{ver} output at {where}: {message}".rstrip(": "))


class NotFound(EvoError):
    """A named thing (job, artifact, doc, task) does not exist."""
