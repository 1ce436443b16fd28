"""What a probe reads of the worker's process, as the Go SDK's probe means
each figure (plugins/worker/runtime.go probe, usage_linux.go;
docs/governance.md): CPU seconds, resident memory, the live heap and the
threads.

The heap is what governance weighs memory by: the bytes the process's
objects hold now, not the pages RSS keeps after they were freed (RSS would
not fall when people leave). In CPython that is two allocators:

* pymalloc, which serves objects of up to 512 bytes from arenas it maps
  itself: its bytes in allocated blocks, as CPython's own
  _PyObject_DebugMallocStats counts them (it walks the arenas' pools:
  about 0.1 ms for 150 MiB of small objects), read through a memory
  stream;
* the C allocator (larger objects, lists' and dicts' tables, big strings,
  gRPC's and protobuf's own): glibc's mallinfo2, bytes in use in its
  arenas plus its mmapped chunks (a few microseconds).

With PYTHONMALLOC=malloc the first is absent and the second counts
everything; a pymalloc whose statistics cannot be read is estimated, its
allocated blocks times PYMALLOC_BLOCK_ESTIMATE; without glibc's mallinfo2
(another libc) the heap is the resident memory, as before: an
overestimate, never one that misses what large objects hold. tracemalloc would be exact but slows every
allocation (5.4x on a loop of dict allocations and JSON, measured on
CPython 3.11), far from cheap enough to leave on.
"""

import ctypes
import gc
import os
import re
import sys
import threading

# The mean size of a pymalloc block when it cannot be read (bytes): the
# small objects' sizes run from 16 to 512.
PYMALLOC_BLOCK_ESTIMATE = 64

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_ALLOCATED = re.compile(rb"^# bytes in allocated blocks\s*=\s*([\d,]+)", re.M)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _libc():
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None, None, None
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is not None:
        mallinfo2.restype = _MallInfo2
        mallinfo2.argtypes = []
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim.restype = ctypes.c_int
        trim.argtypes = [ctypes.c_size_t]
    memstream = None
    if all(hasattr(libc, n) for n in ("open_memstream", "fclose", "free")):
        libc.open_memstream.restype = ctypes.c_void_p
        libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.fclose.restype = ctypes.c_int
        libc.free.argtypes = [ctypes.c_void_p]
        libc.free.restype = None
        memstream = libc
    return mallinfo2, trim, memstream


_mallinfo2, _malloc_trim, _memstream = _libc()
_debug_stats = getattr(ctypes.pythonapi, "_PyObject_DebugMallocStats", None)
if _debug_stats is not None:
    _debug_stats.argtypes = [ctypes.c_void_p]
    _debug_stats.restype = ctypes.c_int
# One reading of pymalloc's statistics at a time (they go through a stream).
_stats_mu = threading.Lock()


def cpu_seconds():
    """The process's CPU time, user and system, since it began (every
    thread's)."""
    t = os.times()
    return t.user + t.system


def rss_bytes():
    """The process's resident memory."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        # ru_maxrss is the peak (KiB on Linux): better than nothing.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except (ImportError, OSError):
        return 0


def threads():
    """The process's threads: the app's and the SDK's, and those of the C
    libraries (gRPC's), as the kernel counts them (the goroutines field)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            # Field 20 counts threads; the name (field 2) may hold spaces
            # and parentheses, so count from its closing one.
            return int(f.read().rpartition(b")")[2].split()[17])
    except (OSError, ValueError, IndexError):
        return threading.active_count()


def pymalloc_bytes():
    """The bytes in pymalloc's allocated blocks, or None when they cannot
    be read (no pymalloc, no glibc memory stream)."""
    if _debug_stats is None or _memstream is None:
        return None
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    with _stats_mu:
        f = _memstream.open_memstream(ctypes.byref(buf), ctypes.byref(size))
        if not f:
            return None
        try:
            used = _debug_stats(f)
        finally:
            _memstream.fclose(f)
        try:
            text = ctypes.string_at(buf, size.value) if buf else b""
        finally:
            _memstream.free(buf)
    if not used:
        return None  # pymalloc is not the object allocator
    m = _ALLOCATED.search(text)
    return int(m.group(1).replace(b",", b"")) if m else None


def malloc_bytes():
    """The bytes the C allocator holds for the process (glibc's mallinfo2:
    in use in its arenas plus its mmapped chunks), or None without it."""
    if _mallinfo2 is None:
        return None
    m = _mallinfo2()
    return m.uordblks + m.hblkhd


def heap_bytes():
    """The live heap: pymalloc's allocated blocks and the C allocator's
    bytes in use (the module's doc says how, and what it falls back to)."""
    large = malloc_bytes()
    if large is None:
        return rss_bytes()
    small = pymalloc_bytes()
    if small is None:
        # 0 when pymalloc is off: the C allocator then holds everything.
        small = sys.getallocatedblocks() * PYMALLOC_BLOCK_ESTIMATE
    return small + large


def release():
    """Collects the garbage and gives the C allocator's free memory back
    to the system (the Go SDK's GC and FreeOSMemory after people left):
    pymalloc returns its empty arenas by itself. A departed person's pages
    are cycles (a page and its collector), so they go at a collection."""
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
