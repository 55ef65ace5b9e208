"""Browser tools for deep-search agents: schemas, per-trajectory sessions and backends.

  from rollout.tools import BrowserSession, CorpusBackend, WebBackend, WebConfig, TOOL_SCHEMAS
"""
from rollout.tools.backend import Backend, BackendError, Page, SearchHit
from rollout.tools.corpus import CorpusBackend
from rollout.tools.schemas import tool_schemas, validate_call
from rollout.tools.session import BrowserSession, ToolResult
from rollout.tools.text import LeakFilter, find_matches
from rollout.tools.web import WebBackend, WebConfig

TOOL_SCHEMAS = tool_schemas()

__all__ = [
    "Backend", "BackendError", "BrowserSession", "CorpusBackend", "LeakFilter", "Page",
    "SearchHit", "TOOL_SCHEMAS", "ToolResult", "WebBackend", "WebConfig", "find_matches",
    "tool_schemas", "validate_call",
]
