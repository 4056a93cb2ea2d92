"""What a version does to a table: ``MergeSpec`` and its rules, the compiled MERGE plan,
SCD2, ``TableSpec``, schema rules, the built-in checks and the SQL a user writes."""
