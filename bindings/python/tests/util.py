import shutil
import tempfile
import unittest


class NodeCase(unittest.TestCase):
    """A fresh data directory per test."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="troupe-py-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)
