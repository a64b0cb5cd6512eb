"""A pickle of primitives, read with a budget: what the sealed attack process sends back can neither run
code nor make the pipeline spin or grow.

The sealed side writes a tree of None, booleans, numbers, strings, bytes, lists and tuples
(:func:`decpriv.seal.plain.flatten`, pickle protocol 5). :func:`read_tree` reads exactly that and nothing
else: a small machine over the opcodes that make those values (:data:`OPCODES`); an opcode naming a
global, a persistent id, a dict, a set or an object is refused, so no class or function is ever looked
up. Python's own unpickler is not used: a memo index of 2**31 in its 5-byte ``LONG_BINPUT`` makes it
zero a 34 GB array, and a declared length of gigabytes is allocated before the bytes arrive.

The budget (:data:`MAX_NODES`, :data:`MAX_DEPTH`, the answer's bytes: ``sandbox.answer_mib``) bounds the tree as
:func:`decpriv.seal.plain.build` will walk it, where a part referenced twice (a memo GET, a DUP) is walked,
and counted, twice: 270 bytes whose memo makes each level a tuple holding the previous one twice stand
for 2**100 values, refused in microseconds. Bytes are read in chunks as they arrive, so a declared length
costs nothing until it is sent, and never more than the budget.
"""

import struct
from typing import Any


class NotPlain(TypeError):
    """A value that is not plain data; ``kind`` names its type (or the tag of a hand-made tree)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


MAX_NODES = 2_000_000  # values in the walked tree (a findings table is a few hundred: its columns are bytes);
# each opcode makes at most one, so reading holds at most ~200 MB of Python objects whatever is sent
MAX_DEPTH = 100  # nesting levels (decpriv's own results nest about 12 deep; build recurses 3 frames a level)
MAX_LONG = 1024  # bytes of one integer (a 2**8192 bound: decpriv's results hold machine integers)
CHUNK = 1 << 24  # bytes read at once: a declared length is never allocated before it arrives


DEFAULT_BYTES = 8 << 30  # what an answer may hold unless sandbox.answer_mib says otherwise


class TooLarge(NotPlain):
    """An answer past its limit (``sandbox.answer_mib``), refused as it streams in."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"answer of at least {size} bytes")
        self.size, self.limit = size, limit


class _Stream:
    """The message's bytes, counted against the budget before each read from the stream. A frame
    (protocol 4+: the opcodes between large strings and bytes) is read whole, then served from memory."""

    def __init__(self, stream: Any, limit: int):
        self._stream, self._left, self._limit, self.started = stream, limit, limit, False
        self._frame, self._at, self._end = b"", 0, 0

    def read(self, n: int) -> bytes:
        at = self._at
        if at + n <= self._end:
            self._at = at + n
            return self._frame[at : at + n]
        if at < self._end:
            raise NotPlain("stream that is not a pickle of primitives (an opcode across a frame's end)")
        if n > self._left:
            raise TooLarge(self._limit - self._left + n, self._limit)
        self._left -= n
        parts = []
        while n:
            part = self._stream.read(min(n, CHUNK))
            if not part:
                raise EOFError("the stream ended inside a message" if self.started else "the stream ended")
            self.started = True
            parts.append(part)
            n -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def frame(self, n: int) -> None:
        if self._at < self._end:
            raise NotPlain("stream that is not a pickle of primitives (a frame inside a frame)")
        self._frame = self.read(n)
        self._at, self._end = 0, len(self._frame)

    def number(self, layout: struct.Struct) -> Any:
        return layout.unpack(self.read(layout.size))[0]


U1, U2, U4, U8, I4 = (struct.Struct(f) for f in ("<B", "<H", "<I", "<Q", "<i"))
F8 = struct.Struct(">d")

# opcode -> (what it does, the layout of its argument): protocol 2-5's opcodes for None, booleans,
# numbers, strings, bytes, lists, tuples, the mark, the memo and framing; nothing else
OPCODES: dict[bytes, tuple[str, Any]] = {
    b"\x80": ("proto", U1),
    b"\x95": ("frame", U8),
    b".": ("stop", None),
    b"N": ("const", None),
    b"\x88": ("const", True),
    b"\x89": ("const", False),
    b")": ("const", ()),
    b"J": ("number", I4),
    b"K": ("number", U1),
    b"M": ("number", U2),
    b"G": ("number", F8),
    b"\x8a": ("long", U1),
    b"\x8b": ("long", I4),
    b"\x8c": ("str", U1),
    b"X": ("str", U4),
    b"\x8d": ("str", U8),
    b"C": ("bytes", U1),
    b"B": ("bytes", U4),
    b"\x8e": ("bytes", U8),
    b"]": ("list", None),
    b"a": ("append", None),
    b"e": ("appends", None),
    b"t": ("tuple", None),
    b"\x85": ("tuple n", 1),
    b"\x86": ("tuple n", 2),
    b"\x87": ("tuple n", 3),
    b"(": ("mark", None),
    b"0": ("pop", None),
    b"1": ("pop mark", None),
    b"2": ("dup", None),
    b"\x94": ("memoize", None),
    b"q": ("put", U1),
    b"r": ("put", U4),
    b"h": ("get", U1),
    b"j": ("get", U4),
}
GLOBALS = {b"c": "global", b"\x93": "stack global", b"i": "inst"}  # named in the refusal, never looked up


def read_tree(stream: Any, limit: int = DEFAULT_BYTES) -> Any:
    """The next tree of primitives on ``stream``, at most ``limit`` bytes read and at most as many held in
    its strings and bytes (raises :class:`NotPlain`, :class:`TooLarge` as soon as the stream passes the
    limit; EOFError at its end)."""
    source = _Stream(stream, limit)
    try:
        tree = _run(source)
    except (NotPlain, EOFError, TimeoutError):  # a timeout: the run's wall clock (sandbox.wall_seconds)
        raise
    except Exception as error:  # an empty stack, a bad index, bad UTF-8, an append to a tuple ...
        raise NotPlain(
            f"stream that is not a pickle of primitives ({type(error).__name__}: {error})"
        ) from None
    nodes, size = measure(tree)
    if nodes > MAX_NODES:
        raise NotPlain(
            f"value of {nodes} parts (shared ones counted at each use), past the {MAX_NODES} allowed"
        )
    if size > limit:  # a part used twice counts twice: what building the values would hold
        raise TooLarge(size, limit)
    return tree


def _run(source: _Stream) -> Any:
    """The opcodes up to STOP, each value made counted against :data:`MAX_NODES`."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    made = 0
    while True:
        code = source.read(1)
        if code not in OPCODES:
            raise _refused(code, stack)
        what, layout = OPCODES[code]
        if what == "stop":
            if len(stack) != 1 or marks:
                raise NotPlain(
                    "stream that is not a pickle of primitives (STOP with a stack of another size)"
                )
            return stack[0]
        made += 1
        if made > MAX_NODES:
            raise NotPlain(f"value of more than {MAX_NODES} parts")
        argument = source.number(layout) if isinstance(layout, struct.Struct) else layout
        if what == "frame":
            source.frame(argument)
        elif what == "const" or what == "number":
            stack.append(argument)
        elif what == "str":
            stack.append(source.read(argument).decode("utf-8", "surrogatepass"))
        elif what == "bytes":
            stack.append(source.read(argument))
        elif what == "long":
            if not 0 <= argument <= MAX_LONG:
                raise NotPlain(f"integer of {argument} bytes, past the {MAX_LONG} allowed")
            stack.append(int.from_bytes(source.read(argument), "little", signed=True))
        else:
            _structure(what, argument, stack, marks, memo)


def _structure(what: str, argument: Any, stack: list, marks: list[int], memo: dict[int, Any]) -> None:
    """The opcodes that arrange values: lists, tuples, the mark, the memo."""
    if what == "proto":
        return
    if what == "list":
        stack.append([])
    elif what == "append":
        value = _above_mark(stack, marks, 2)[1]
        _list(stack[-2]).append(value)
        stack.pop()
    elif what == "appends":
        items = _pop_mark(stack, marks)
        _list(stack[-1]).extend(items)
    elif what == "tuple":
        stack.append(tuple(_pop_mark(stack, marks)))
    elif what == "tuple n":
        items = _above_mark(stack, marks, argument)
        del stack[-argument:]
        stack.append(tuple(items))
    elif what == "mark":
        marks.append(len(stack))
    elif what == "pop":
        _above_mark(stack, marks, 1)
        stack.pop()
    elif what == "pop mark":
        _pop_mark(stack, marks)
    elif what == "dup":
        stack.append(_above_mark(stack, marks, 1)[0])
    elif what == "memoize":
        memo[len(memo)] = _above_mark(stack, marks, 1)[0]
    elif what == "put":
        memo[argument] = _above_mark(stack, marks, 1)[0]
    else:  # get
        if argument not in memo:
            raise NotPlain(
                f"stream that is not a pickle of primitives (memo {argument} read before it was set)"
            )
        stack.append(memo[argument])


def _above_mark(stack: list, marks: list[int], n: int) -> list:
    """The top ``n`` values, none of them below the last mark."""
    if len(stack) - (marks[-1] if marks else 0) < n:
        raise NotPlain("stream that is not a pickle of primitives (an opcode without its operands)")
    return stack[len(stack) - n :]


def _pop_mark(stack: list, marks: list[int]) -> list:
    if not marks:
        raise NotPlain("stream that is not a pickle of primitives (no mark to pop to)")
    at = marks.pop()
    items = stack[at:]
    del stack[at:]
    return items


def _list(target: Any) -> list:
    if type(target) is not list:
        raise NotPlain("stream that is not a pickle of primitives (an append to something not a list)")
    return target


def _refused(code: bytes, stack: list) -> NotPlain:
    """The refusal of an opcode outside :data:`OPCODES`: a global by its name (never looked up)."""
    if code == b"\x93" and len(stack) >= 2 and all(type(s) is str for s in stack[-2:]):
        return NotPlain(f"{stack[-2]}.{stack[-1]}")
    if code in (b"P", b"Q"):
        return NotPlain("persistent id")
    if code in GLOBALS:
        return NotPlain(f"pickled {GLOBALS[code]} (a global, never looked up)")
    return NotPlain(f"stream that is not a pickle of primitives (opcode {code!r})")


def measure(tree: Any) -> tuple[int, int]:
    """(parts, bytes of strings and bytes) of ``tree`` as a walk from its root meets them, a shared list
    or tuple counted at each use: linear in the distinct containers (each one's total is kept), refusing
    a value deeper than :data:`MAX_DEPTH` or one that contains itself."""
    if type(tree) not in (list, tuple):
        return 1, len(tree) if type(tree) in (str, bytes) else 0
    done: dict[int, tuple[int, int]] = {}
    path, totals, on_path = [(tree, iter(tree))], [[1, 0]], {id(tree)}
    while path:
        node, items = path[-1]
        for item in items:
            kind = type(item)
            if kind is not list and kind is not tuple:
                totals[-1][0] += 1
                totals[-1][1] += len(item) if kind is str or kind is bytes else 0
                continue
            if id(item) in done:
                totals[-1][0] += done[id(item)][0]
                totals[-1][1] += done[id(item)][1]
                continue
            if id(item) in on_path:
                raise NotPlain("value that contains itself")
            if len(path) >= MAX_DEPTH:
                raise NotPlain(f"value nested more than {MAX_DEPTH} deep")
            path.append((item, iter(item)))
            totals.append([1, 0])
            on_path.add(id(item))
            break
        else:
            path.pop()
            on_path.discard(id(node))
            nodes, size = totals.pop()
            done[id(node)] = (nodes, size)
            if totals:
                totals[-1][0] += nodes
                totals[-1][1] += size
    return done[id(tree)]
