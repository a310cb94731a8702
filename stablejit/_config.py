"""Process-wide settings."""

from __future__ import annotations

import os
import threading


class Config:
    """stablejit's settings; change them through :data:`stablejit.config`.

    Attributes:
        cache_size: the most compiled entries kept across all functions; the
            least recently used entry is evicted (and its executables freed)
            beyond it. Default 1024, or ``$STABLEJIT_CACHE_SIZE``.

    Example:
        >>> import stablejit
        >>> stablejit.config.cache_size = 256
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._cache_size = _env_int("STABLEJIT_CACHE_SIZE", 1024)

    @property
    def cache_size(self) -> int:
        return self._cache_size

    @cache_size.setter
    def cache_size(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"cache_size must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"cache_size must be at least 1, got {value}")
        with self._lock:
            self._cache_size = value
        from ._cache import evict_to_size

        evict_to_size()

    def __repr__(self):
        return f"stablejit.Config(cache_size={self._cache_size})"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${name} must be an integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"${name} must be at least 1, got {value}")
    return value


config = Config()
