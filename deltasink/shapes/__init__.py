"""What a version does to a table: ``MergeSpec``, the compiled MERGE plan, SCD2, ``TableSpec``, schema rules and the SQL a user writes."""
