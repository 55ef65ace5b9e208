"""A count of operations in flight and its peak since the last reading.

  gauge = InFlight()
  with gauge:            # around each call
    ...
  gauge.now              # in flight at this moment
  gauge.take_peak()      # the most at once since the previous take (then starts anew)

Used within one event loop, and read from another thread: a lock keeps the count exact.
"""
from __future__ import annotations

import threading


class InFlight:

  def __init__(self):
    self._lock = threading.Lock()
    self.now = 0
    self._peak = 0

  def __enter__(self) -> "InFlight":
    with self._lock:
      self.now += 1
      self._peak = max(self._peak, self.now)
    return self

  def __exit__(self, *exc) -> None:
    with self._lock:
      self.now -= 1

  def take_peak(self) -> int:
    """The peak since the last take; the next period starts at what is in flight now."""
    with self._lock:
      peak, self._peak = self._peak, self.now
      return peak
