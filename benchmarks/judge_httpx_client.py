"""The judge's former LLM transport, raw httpx, kept only as bench_judge.py's comparison peer.

`HttpxChatClient` is judge.llm.ChatClient (same retry policy, metrics, cache, re-asks) with
`_attempt` done by POSTing `{base_url}/chat/completions` through httpx AsyncClients of at
most 8 connections each (one client with a large pool scans it per request: ~5 ms of CPU a
call), sharing one SSL context, slots handed out LIFO. The judge itself uses the openai SDK.
"""
from __future__ import annotations

import asyncio
from typing import Any

import httpx

from carr_common.http_retry import AttemptFailed
from judge.llm import _SLOTS_PER_CLIENT, ChatClient, _slots


class HttpxChatClient(ChatClient):

  def _new_loop_state(self) -> tuple[list[httpx.AsyncClient], asyncio.LifoQueue]:
    ssl_context = httpx.create_ssl_context()
    key = self.config.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    size = min(_SLOTS_PER_CLIENT, self.config.concurrency)
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    clients = [httpx.AsyncClient(headers=headers, limits=limits, timeout=self.config.timeout,
                                 verify=ssl_context, trust_env=False)
               for _ in range(-(-self.config.concurrency // size))]
    return clients, _slots(self.config.concurrency, size)

  @staticmethod
  async def _close_loop_state(state: tuple[list[Any], asyncio.LifoQueue]) -> None:
    for client in state[0]:
      await client.aclose()

  async def _attempt(self, messages: list[dict[str, str]]) -> tuple[Any, dict[str, Any]]:
    clients, slots = self._pool.get()
    body = {"model": self.config.model, "messages": messages, **self._params}
    url = self.config.base_url.rstrip("/") + "/chat/completions"
    slot = await slots.get()
    try:
      async with asyncio.timeout(self.config.timeout):
        response = await clients[slot].post(url, json=body)
    except (TimeoutError, httpx.TimeoutException):
      raise AttemptFailed(f"timeout after {self.config.timeout:g}s") from None
    except httpx.HTTPError as e:
      raise AttemptFailed(f"connection error ({type(e).__name__})") from None
    finally:
      slots.put_nowait(slot)
    if response.status_code != 200:
      raise self._status_failure(response)
    try:
      data = response.json()
      content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
      raise AttemptFailed("unreadable response body") from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return content, usage
