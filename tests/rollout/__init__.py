"""Tests of rollout: the chat format, the agent loop (agent/), the browser tools (tools/),
the engines (engines/)."""
