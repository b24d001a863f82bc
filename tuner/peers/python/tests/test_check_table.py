"""The installed-table check's pure parts (no torch, no GPU): --m parsing, reading a table, the cells to check, what
"same" means, the summary issue 15's target reads, and the text and JSON reports."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from qtune_peers import check_table  # noqa: E402

PICK = {"block_shape": [16, 256, 128], "warp_shape": [16, 32, 64], "num_stages": 4, "use_tma": True}
LAYER = {"a_dtype": "float16", "b_dtype": "uint4", "c_dtype": "float16", "bs_dtype": "float16", "shape_n": 8192,
         "shape_k": 4096, "input_scale_group_size": 0, "weight_scale_group_size": 0, "weight_scale_group_size_n": 0,
         "weight_scale_type": "channel", "has_zero_point": False, "is_fp_zero_point": False, "num_experts": 0}


def table(layers=None):
    entry = {"format": "w4a16-int4-ch", "layer": LAYER,
             "tuning_config": [[0, 16, PICK], [16, 1 << 30, dict(PICK, num_stages=3)]],
             "measured": [{"m": 1, "median_us": 10.0, "range": 0}, {"m": 16, "median_us": 11.0, "range": 0},
                          {"m": 1024, "median_us": 90.0, "range": 1}]}
    return {"format": "qtune-humming-table", "version": 1, "gpu": "h200", "device_name": "NVIDIA H200", "sm": 90,
            "layers": [entry] if layers is None else layers}


class CheckTableTest(unittest.TestCase):
    def write(self, data):
        handle, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(handle, "w") as stream:
            json.dump(data, stream)
        self.addCleanup(os.remove, path)
        return path

    def test_m_list_is_parsed_sorted_once_and_bad_values_name_the_option(self):
        self.assertEqual(check_table.parse_m_list("64, 1,16,1"), [1, 16, 64])
        for text in ("", "0", "-4", "1,x", "2000000"):
            with self.assertRaises(check_table.CheckInputError) as caught:
                check_table.parse_m_list(text)
            self.assertTrue(str(caught.exception).startswith("--m: "), caught.exception)

    def test_a_table_is_read_with_its_formats_and_the_cells_are_its_tuned_ms_unless_given(self):
        layers, loaded = check_table.read_table(self.write(table()))
        self.assertEqual(len(layers), 1)
        self.assertEqual(loaded["gpu"], "h200")
        self.assertEqual([m for _, m in check_table.cells(layers)], [1, 16, 1024])
        self.assertEqual([m for _, m in check_table.cells(layers, [4, 4096])], [4, 4096])

    def test_a_file_that_is_no_table_is_refused_naming_the_field(self):
        for data, field in ((table(layers=[]), "layers"), ({"format": "other"}, "format"),
                            (table(layers=[{"layer": LAYER, "tuning_config": [[0, 1 << 30, PICK]]}]), "format")):
            with self.assertRaises(check_table.CheckInputError) as caught:
                check_table.read_table(self.write(data))
            self.assertIn(field, str(caught.exception))
        with self.assertRaises(check_table.CheckInputError):
            check_table.read_table("/nonexistent/table.json")

    def test_same_config_ignores_key_order_and_tuples(self):
        self.assertTrue(check_table.same_config(PICK, dict(reversed(list(PICK.items())))))
        self.assertTrue(check_table.same_config(dict(PICK, block_shape=(16, 256, 128)), PICK))
        self.assertFalse(check_table.same_config(PICK, dict(PICK, num_stages=3)))
        self.assertFalse(check_table.same_config(PICK, None))

    def test_same_config_fills_hummings_defaults_and_ignores_compute_keys(self):
        import dataclasses

        @dataclasses.dataclass(kw_only=True)
        class TuningConfig:  # the shape of Humming's: two required fields, the rest defaulted
            block_shape: tuple
            warp_shape: tuple
            num_stages: int = 2
            num_ctas_per_sm: int = 1
            use_tma: bool = None
            _private: int = 0

        defaults = check_table.tuning_config_defaults(TuningConfig)
        self.assertEqual(defaults, {"block_shape": None, "warp_shape": None, "num_stages": 2, "num_ctas_per_sm": 1,
                                    "use_tma": None})
        heuristic = dict(PICK, use_f16_accum=False)  # as Humming's heuristic returns it
        spelled_out = dict(PICK, num_ctas_per_sm=1)  # as qtune's table writes it
        self.assertFalse(check_table.same_config(heuristic, spelled_out))
        self.assertTrue(check_table.same_config(heuristic, spelled_out, defaults))
        self.assertFalse(check_table.same_config(heuristic, dict(spelled_out, num_ctas_per_sm=2), defaults))
        self.assertFalse(check_table.same_config(dict(PICK, num_stages=2), dict(PICK, num_stages=None), defaults))

    def test_same_means_bitwise_for_one_configuration_and_within_tolerance_for_two(self):
        # The same configuration: bitwise, nothing less.
        self.assertTrue(check_table.verdict(True, True, 0.0, 5.0, 0)[0])
        self.assertFalse(check_table.verdict(True, False, 1e-6, 5.0, 0)[0])
        # a kernel that is not bitwise reproducible run to run: the same configuration is judged by the tolerance
        ok, said = check_table.verdict(True, False, 0.0156, 17.0, 0, reproducible=False)
        self.assertTrue(ok)
        self.assertIn("not bitwise reproducible", said)
        self.assertFalse(check_table.verdict(True, False, 0.5, 17.0, 0, reproducible=False)[0])
        # Two configurations: within 1% of the largest |output|, and nothing non-finite.
        self.assertTrue(check_table.verdict(False, False, 0.049, 5.0, 0)[0])
        self.assertFalse(check_table.verdict(False, False, 0.051, 5.0, 0)[0])
        ok, said = check_table.verdict(False, True, 0.0, 5.0, 3)
        self.assertFalse(ok)
        self.assertIn("3 NaN", said)

    def test_the_summary_is_the_geometric_mean_and_the_slowest_cell(self):
        rows = [check_table.row("w4a16-int4-ch", LAYER, 1, True, True, "", 10.0, 10.0, "torch.profiler"),
                check_table.row("w4a16-int4-ch", LAYER, 16, False, True, "", 12.0, 10.0, "torch.profiler"),
                check_table.row("w4a16-int4-ch", LAYER, 64, False, False, "", 9.9, 10.0, "torch.profiler")]
        summary = check_table.summarize(rows)
        self.assertAlmostEqual(summary["geomean_speedup"], (1.0 * 1.2 * 0.99) ** (1 / 3))
        self.assertEqual(summary["slowest_cell"], {"layer": "N=8192 K=4096", "m": 64, "speedup": 0.99})
        self.assertEqual(summary["differing"], 1)
        text = check_table.render_text(rows, summary)
        self.assertIn("N=8192 K=4096", text)
        self.assertEqual(text.count("NO"), 1, text)  # the differing cell
        self.assertIn("geomean 1.059x", text)
        report = check_table.report_json("t.json", "NVIDIA H200", rows, summary)
        self.assertEqual(json.loads(json.dumps(report))["summary"]["cells"], 3)

    def test_bad_input_exits_two_with_one_line_and_no_torch(self):
        stderr = io.StringIO()
        with redirect_stderr(stderr):
            status = check_table.main([self.write(table(layers=[])), "--m", "1"])
        self.assertEqual(status, 2)
        self.assertEqual(stderr.getvalue().count("\n"), 1, stderr.getvalue())
        self.assertIn("layers", stderr.getvalue())
        with redirect_stderr(io.StringIO()):
            self.assertEqual(check_table.main([self.write(table()), "--m", "0"]), 2)


if __name__ == "__main__":
    unittest.main()
