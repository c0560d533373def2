"""The compiled program is the evidence: XLA's compile and what it wrote, read.

This package knows no model. ``toolchain`` finds the compilers (libtpu, the
CUDA plugin) and makes a named topology's compile-only devices;
``analysis`` compiles a lowered program (reading out-of-memory and
rematerialisation messages) and turns its memory and cost analyses into plain
figures; ``hlo`` is the one parser of XLA's HLO text (instructions, shapes,
byte sizes, metadata, stack frames); ``dump`` reads the dump files of a
compile (live ranges, buffer assignment); ``collectives`` lists the
collectives of a program per mesh axis; ``native_log`` keeps XLA's and absl's
native log lines off the user's stderr.
"""
