"""delta-rs access to both Delta logs, used by both engines: opening tables, the ``txn`` marker (read and written), commits without data, and the staging log."""
