"""``corenn.backends.mps``: Apple's Metal device. corenn has no ``mps`` backend unless a plugin registers one."""
from __future__ import annotations

__all__ = ["is_available", "is_built", "is_macos_or_newer"]


def is_available() -> bool:
    """True when a plugin registers an ``mps`` backend that sees a device."""
    from corenn import dispatch
    backend = dispatch.backends._backends.get("mps")
    return backend is not None and backend.device_count() > 0


def is_built() -> bool:
    """Whether an ``mps`` backend is installed (registered), whether or not it sees a device."""
    from corenn import dispatch
    return "mps" in dispatch.backends


def is_macos_or_newer(major: int, minor: int) -> bool:
    """Whether this is macOS ``major.minor`` or newer (False elsewhere)."""
    import platform
    release = platform.mac_ver()[0]
    if not release:
        return False
    parts = [int(p) for p in release.split(".")[:2]] + [0]
    return (parts[0], parts[1]) >= (major, minor)
