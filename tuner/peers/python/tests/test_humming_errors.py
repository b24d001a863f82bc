"""The Humming adapter names the compiler's own error when Humming cannot build a kernel: ptxas's closing "aborted due
to errors" line names nothing, so the line before it that does is reported. Needs neither torch nor Humming."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from qtune_peers.adapters import humming  # noqa: E402  (imports neither torch nor Humming at module level)


class FirstErrorLine(unittest.TestCase):
    def test_the_specific_ptxas_error_comes_before_the_closing_summary(self):
        log = ("nvcc -arch=sm_90a kernel.cu\n"
               "ptxas error   : Entry function 'humming_kernel' uses too much shared data (0x3a000 bytes, 0x38c00 max)\n"
               "ptxas fatal   : Ptx assembly aborted due to errors\n")
        self.assertEqual(humming._first_error_line(log),
                         "ptxas error   : Entry function 'humming_kernel' uses too much shared data (0x3a000 bytes, 0x38c00 max)")

    def test_an_error_line_in_any_case_counts(self):
        log = "ptxas /tmp/k.ptx, line 812; Error: Feature 'setmaxnreg' requires .target sm_90a\nptxas fatal   : Ptx assembly aborted due to errors\n"
        self.assertEqual(humming._first_error_line(log), "ptxas /tmp/k.ptx, line 812; Error: Feature 'setmaxnreg' requires .target sm_90a")

    def test_the_summary_when_it_is_the_only_error_line(self):
        self.assertEqual(humming._first_error_line("building\nptxas fatal   : Ptx assembly aborted due to errors\n"),
                         "ptxas fatal   : Ptx assembly aborted due to errors")

    def test_a_log_without_errors_gives_its_first_line_and_an_empty_one_says_so(self):
        self.assertEqual(humming._first_error_line("\n  warning: slow\nmore\n"), "warning: slow")
        self.assertEqual(humming._first_error_line(""), "(the compiler said nothing)")

    def test_long_lines_are_cut(self):
        self.assertEqual(len(humming._first_error_line("error: " + "x" * 1000)), 300)


if __name__ == "__main__":
    unittest.main()
