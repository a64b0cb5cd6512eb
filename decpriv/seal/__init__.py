"""The seal: the attack's process, and the border between what an adversary sees and the truth.

What it guarantees (docs/ARCHITECTURE.md, "The seal"): an attack's code runs only in a process that never
held the truth. :mod:`~decpriv.seal.zygote` forks that process inside the least-privilege sandbox of
:mod:`~decpriv.seal.sandbox` (bubblewrap: no capability, its own namespaces, an allow-listed read-only
view of the files it needs, a limit on every resource); :mod:`~decpriv.seal.process` drives it;
:mod:`~decpriv.seal.truth` is the ground truth, held by the pipeline alone for scoring.

What crosses the border: into the process, the attack's pickled config, its View and context; back out,
plain data only (:mod:`~decpriv.seal.plain`: numbers, strings, containers, arrays, tensors, frames),
read by :mod:`~decpriv.seal.primitives` with opcodes for primitives alone, so no code ever crosses back.
"""
