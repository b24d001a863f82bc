"""qtune's side of kernel providers hosted in Python.

qtune (C++) starts ``qtune_peer_worker.py``, which speaks qtune's worker protocol and runs adapters: thin classes
that pack qtune's quantized operands with a peer's own helpers (PyTorch, Marlin, Humming, DeepGEMM) and launch the
peer's kernel on the stream qtune gives them. Operands, verification and measurement come from qtune's C ABI
(``abi.py``). ``humming_table`` installs a table exported by ``qtune export --humming`` in place of Humming's
heuristic. Nothing here imports torch until an adapter needs it.
"""

__all__ = ["abi", "adapters", "errors", "humming_table", "protocol", "worker"]
