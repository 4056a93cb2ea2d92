"""delta-rs access to both Delta logs, used by both engines: opening and reading tables,
the ``txn`` marker (read in :mod:`.marker` and :mod:`.target`, written in
:mod:`.commits`), commits without data, and the staging log (:mod:`.staging`)."""
