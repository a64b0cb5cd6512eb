"""The random streams: every draw of a run comes from a named stream of one root seed.

What it guarantees: :mod:`~decpriv.random.streams` derives each consumer's seed from the root seed and
its name alone, so adding a consumer never shifts another's numbers, and draws on the CPU then moves, so
one config and seed give the same tables on any device; :mod:`~decpriv.random.philox` is the
counter-based Philox4x32-10 stream, drawn on the device itself with the same integers and uniforms as on
the CPU.

What crosses its border: a root seed and a name in, a generator or a tensor out; nothing here reads the
global random state.
"""
