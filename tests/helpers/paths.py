"""The checkout's paths, for tests that run its programs."""
import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
