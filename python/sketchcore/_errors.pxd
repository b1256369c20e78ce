# The one translation of the bridge's error kinds into Python exceptions, shared by every
# binding module.
from libcpp.string cimport string

from sketchcore._sketchcore cimport ErrorKind


cdef inline int check(ErrorKind kind, const string& message) except -1:
    if kind == ErrorKind.none:
        return 0
    text = message.decode("utf-8", "replace")
    if kind == ErrorKind.value:
        raise ValueError(text)
    if kind == ErrorKind.type:
        raise TypeError(text)
    if kind == ErrorKind.memory:
        raise MemoryError(text or "sketchcore: out of memory")
    raise RuntimeError(text)
