"""Developer tools that are not part of the package or of the default test run."""
