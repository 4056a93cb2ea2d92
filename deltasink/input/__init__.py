"""User input (a PySpark DataFrame or Arrow data) to one validated Arrow table."""
