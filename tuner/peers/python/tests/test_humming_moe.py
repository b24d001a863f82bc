"""The Humming MoE adapter's host-side pieces: the token-indexed layout it builds from qtune's routing (vLLM's
moe_align_block_size, docs/moe.md's rule) and the config it picks per routed row count. Needs torch (any device, the
CPU too); skipped without it."""
import importlib.util
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from qtune_peers.adapters import humming  # noqa: E402  (imports neither torch nor Humming at module level)
from qtune_peers.errors import InputError  # noqa: E402

HAS_TORCH = importlib.util.find_spec("torch") is not None


def expected_layout(ids, experts, block_m):
    """docs/moe.md's token-indexed layout, written out: per expert in expert order its pairs ascending, padded to a
    multiple of block_m with the sentinel (pairs); experts without pairs take no blocks."""
    flat = [e for row in ids for e in row]
    sorted_ids, expert_ids = [], []
    for expert in range(experts):
        mine = [p for p, e in enumerate(flat) if e == expert]
        if not mine:
            continue
        blocks = -(-len(mine) // block_m)
        sorted_ids += mine + [len(flat)] * (blocks * block_m - len(mine))
        expert_ids += [expert] * blocks
    return sorted_ids, expert_ids


@unittest.skipUnless(HAS_TORCH, "needs torch")
class AlignBlockSize(unittest.TestCase):
    def test_matches_the_layout_rule(self):
        import torch

        cases = [([[0, 3], [5, 1], [3, 7]], 8, 4), ([[2, 1, 0]] * 5, 4, 8), ([[6]], 8, 16), ([[1, 0], [0, 1]], 2, 1)]
        for ids, experts, block_m in cases:
            sorted_ids, expert_ids, padded = humming.align_block_size(torch.tensor(ids, dtype=torch.int32), experts,
                                                                      block_m)
            want_ids, want_experts = expected_layout(ids, experts, block_m)
            self.assertEqual(sorted_ids.tolist(), want_ids, (ids, block_m))
            self.assertEqual(expert_ids.tolist(), want_experts, (ids, block_m))
            self.assertEqual(padded.tolist(), [len(want_ids)])
            self.assertEqual(sorted_ids.dtype, torch.int32)
            self.assertEqual(expert_ids.dtype, torch.int32)


class MoeTuningConfig(unittest.TestCase):
    def test_a_dict_runs_as_it_is_and_a_list_by_routed_rows(self):
        small, large = {"block_shape": [8, 128, 256]}, {"block_shape": [64, 128, 128]}
        table = [[0, 64, small], [64, 1 << 30, large]]
        self.assertIs(humming._moe_tuning_config(None, small, 1000), small)
        self.assertIs(humming._moe_tuning_config(None, table, 64), small)
        self.assertIs(humming._moe_tuning_config(None, table, 65), large)
        self.assertIs(humming._moe_tuning_config(None, [[0, 0, large]], 10 ** 6), large)  # m_hi 0: no upper bound
        with self.assertRaises(InputError):
            humming._moe_tuning_config(None, [[0, 16, small]], 17)


if __name__ == "__main__":
    unittest.main()
