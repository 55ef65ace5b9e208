"""The judge's former LLM transport, raw httpx, kept only as bench_judge.py's comparison peer.

`HttpxChatClient` is judge.llm.ChatClient (same retries, metrics, cache, re-asks) with
`_attempt` done by POSTing `{base_url}/chat/completions` through httpx AsyncClients of at
most 8 connections each (one client with a large pool scans it per request: ~5 ms of CPU a
call), sharing one SSL context, slots handed out LIFO. The judge itself uses the openai SDK.
"""
from __future__ import annotations

import asyncio
from typing import Any

import httpx

from judge.llm import AttemptError, ChatClient
from judge.records import clean_text
from judge.redaction import redact

_SLOTS_PER_CLIENT = 8


class HttpxChatClient(ChatClient):

  def _loop_state(self) -> tuple[list[httpx.AsyncClient], asyncio.LifoQueue]:
    loop = asyncio.get_running_loop()
    state = self._per_loop.get(loop)
    if state is None:
      ssl_context = httpx.create_ssl_context()
      key = self.config.api_key()
      headers = {"Authorization": f"Bearer {key}"} if key else {}
      size = min(_SLOTS_PER_CLIENT, self.config.concurrency)
      limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
      clients = [httpx.AsyncClient(headers=headers, limits=limits, timeout=self.config.timeout,
                                   verify=ssl_context, trust_env=False)
                 for _ in range(-(-self.config.concurrency // size))]
      slots: asyncio.LifoQueue = asyncio.LifoQueue()
      for slot in reversed(range(self.config.concurrency)):
        slots.put_nowait(slot // size)
      state = self._per_loop[loop] = (clients, slots)
    return state

  async def aclose(self) -> None:
    state = self._per_loop.pop(asyncio.get_running_loop(), None)
    for client in state[0] if state else []:
      await client.aclose()

  async def _attempt(self, messages: list[dict[str, str]]) -> tuple[Any, dict[str, Any]]:
    clients, slots = self._loop_state()
    body = {"model": self.config.model, "messages": messages, **self._params}
    url = self.config.base_url.rstrip("/") + "/chat/completions"
    slot = await slots.get()
    try:
      async with asyncio.timeout(self.config.timeout):
        response = await clients[slot].post(url, json=body)
    except (TimeoutError, httpx.TimeoutException):
      raise AttemptError(f"timeout after {self.config.timeout:g}s") from None
    except httpx.HTTPError as e:
      raise AttemptError(f"connection error ({type(e).__name__})") from None
    finally:
      slots.put_nowait(slot)
    status = response.status_code
    if status == 429 or status >= 500:
      raise AttemptError(f"HTTP {status}", response.headers.get("retry-after"))
    if status != 200:
      detail = redact(clean_text(response.text[:2000]), self._secrets())[:200]
      raise AttemptError(f"judge endpoint refused the request: HTTP {status} {detail!r}",
                         final=True)
    try:
      data = response.json()
      content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
      raise AttemptError("unreadable response body") from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return content, usage
