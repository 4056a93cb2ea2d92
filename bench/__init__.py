"""deltasink benchmarks (not part of the package or the test suite); see README.md."""
