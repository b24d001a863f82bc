"""The Humming table loader against a stand-in for Humming's modules (no torch, no GPU): which calls the table
answers, which go to Humming's heuristic, and what a broken file says."""
import json
import os
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from qtune_peers import humming_table  # noqa: E402

STUB_FILES = {
    "humming/__init__.py": "",
    "humming/tune/__init__.py": """
        calls = []

        def get_heuristics_config(meta, shape_m=None, use_f16_accum=False, use_batch_invariant=False,
                                  gemm_type="dense"):
            calls.append((shape_m, use_f16_accum))
            return "humming's heuristic"
    """,
    "humming/kernel/__init__.py": "",
    "humming/kernel/humming.py": """
        from humming.tune import get_heuristics_config

        class HummingKernel:
            _str2kernel_cache = {"cached": [0, 1 << 30, 7, 0]}

            @classmethod
            def prepare_kernels(cls, meta):
                return get_heuristics_config(meta)
    """,
    "humming/layer.py": "from humming.tune import get_heuristics_config\n",
}

SMALL = {"block_shape": [16, 256, 128], "warp_shape": [16, 32, 64], "num_stages": 4, "use_warp_spec": True,
         "use_tma": True, "use_mbarrier": True}
LARGE = dict(SMALL, block_shape=[128, 256, 64], warp_shape=[128, 32, 64], multi_cast_size_a=2)
LAYER = {"a_dtype": "float16", "b_dtype": "uint4", "c_dtype": "float16", "bs_dtype": "float16", "shape_n": 8192,
         "shape_k": 8192, "input_scale_group_size": 0, "weight_scale_group_size": 0, "weight_scale_group_size_n": 0,
         "weight_scale_type": "channel", "has_zero_point": False, "is_fp_zero_point": False, "num_experts": 0}
TABLE = {"format": "qtune-humming-table", "version": 1, "gpu": "h200", "device_name": "NVIDIA H200", "sm": 90,
         "layers": [{"format": "w4a16-int4-ch", "layer": LAYER,
                     "tuning_config": [[0, 16, SMALL], [16, 1 << 30, LARGE]],
                     "measured": [{"m": 16, "median_us": 15.0, "range": 0}]}]}


class DataType:
    """Like Humming's dtypes: str() is the name."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


class Meta:
    """Like HummingLayerMeta: dtypes as objects, the rest plain."""

    def __init__(self, **overrides):
        fields = dict(LAYER, **overrides)
        for name, value in fields.items():
            setattr(self, name, DataType(value) if name.endswith("dtype") else value)


class HummingTableTest(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        for name, text in STUB_FILES.items():
            path = os.path.join(self.directory.name, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as stream:
                stream.write(textwrap.dedent(text))
        sys.path.insert(0, self.directory.name)
        for name in list(sys.modules):
            if name == "humming" or name.startswith("humming."):
                del sys.modules[name]
        self.table_path = self.write(TABLE)

    def tearDown(self):
        humming_table.uninstall()
        sys.path.remove(self.directory.name)
        self.directory.cleanup()

    def write(self, data, name="table.json"):
        path = os.path.join(self.directory.name, name)
        with open(path, "w") as stream:
            json.dump(data, stream)
        return path

    def test_installed_table_answers_for_its_layers_and_humming_for_the_rest(self):
        self.assertTrue(humming_table.install(self.table_path, "NVIDIA H200", (9, 0)))
        import humming.kernel.humming as kernel
        import humming.layer as layer
        import humming.tune as tune

        self.assertEqual(kernel.HummingKernel._str2kernel_cache, {})  # kernels chosen before must be chosen again
        for module in (tune, kernel, layer):
            self.assertEqual(module.get_heuristics_config(Meta()), [[0, 16, SMALL], [16, 1 << 30, LARGE]])
        self.assertEqual(tune.get_heuristics_config(Meta(), 1), SMALL)
        self.assertEqual(tune.get_heuristics_config(Meta(), 17), LARGE)
        self.assertEqual(tune.get_heuristics_config(Meta(), 100000), LARGE)
        self.assertEqual(kernel.HummingKernel.prepare_kernels(Meta())[1][2]["multi_cast_size_a"], 2)
        self.assertEqual(tune.calls, [])
        # Another shape, another compute config: Humming's own rules.
        self.assertEqual(tune.get_heuristics_config(Meta(shape_n=4096)), "humming's heuristic")
        self.assertEqual(tune.get_heuristics_config(Meta(), use_f16_accum=True), "humming's heuristic")
        self.assertEqual(tune.get_heuristics_config(Meta(b_dtype="uint8")), "humming's heuristic")
        self.assertEqual(len(tune.calls), 3)
        # The answer is a copy: a caller that edits it cannot change the table.
        answer = tune.get_heuristics_config(Meta(), 1)
        answer["num_stages"] = 2
        self.assertEqual(tune.get_heuristics_config(Meta(), 1)["num_stages"], 4)
        self.assertEqual(humming_table.installed()["gpu"], "h200")

    def test_uninstall_restores_hummings_heuristic(self):
        import humming.tune as tune
        original = tune.get_heuristics_config
        humming_table.install(self.table_path, "NVIDIA H200", (9, 0))
        humming_table.uninstall()
        import humming.kernel.humming as kernel
        self.assertIs(tune.get_heuristics_config, original)
        self.assertIs(kernel.get_heuristics_config, original)
        self.assertIsNone(humming_table.installed())

    def test_a_table_of_another_gpu_is_not_installed(self):
        import humming.tune as tune
        original = tune.get_heuristics_config
        self.assertFalse(humming_table.install(self.table_path, "NVIDIA A100-SXM4-80GB", (8, 0)))
        self.assertFalse(humming_table.install(self.table_path, "NVIDIA H100 80GB HBM3", (9, 0)))
        self.assertIs(tune.get_heuristics_config, original)
        self.assertTrue(humming_table.install(self.table_path, "NVIDIA H200 NVL", (9, 0)))

    def test_broken_files_name_the_field(self):
        cases = [
            (dict(TABLE, format="qtune-table"), "format"),
            (dict(TABLE, version=2), "version"),
            (dict(TABLE, layers=[dict(TABLE["layers"][0], tuning_config=[[0, 16, SMALL], [17, 1 << 30, LARGE]])]),
             "layers[0].tuning_config[1]"),
            (dict(TABLE, layers=[dict(TABLE["layers"][0], tuning_config=[[0, 16, SMALL]])]),
             "layers[0].tuning_config"),
            (dict(TABLE, layers=[{"format": "w4a16-int4-ch"}]), "layers[0]: missing"),
        ]
        for data, field in cases:
            with self.assertRaises(humming_table.TableError) as raised:
                humming_table.load(self.write(data, "broken.json"))
            self.assertIn(field, str(raised.exception))


if __name__ == "__main__":
    unittest.main()
