"""The on-disk format both engines share: the staging table's layout (its columns,
properties and quarantine records: :mod:`~deltasink.ops.layout`), what a target commit
records in its metadata (:mod:`~deltasink.ops.history`) and the origin a version records
of its batch (:mod:`~deltasink.ops.origin`). The stream side that reads origins is
:mod:`deltasink.stream`; a writer's status is :mod:`deltasink.status`.
``checkpoint`` and ``placing`` here are old paths of :mod:`deltasink.stream` modules."""
