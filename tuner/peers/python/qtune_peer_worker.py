#!/usr/bin/env python3
"""The worker qtune starts for kernel providers hosted in Python (tuner/peers/peer_host.hpp):

    python qtune_peer_worker.py --library libqtune_peer_abi.so [--peer-path DIR]... [--test-peers] --fd N

It speaks qtune's worker protocol on file descriptor N and is not run by hand."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from qtune_peers.worker import main  # noqa: E402  (the package sits beside this script)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
