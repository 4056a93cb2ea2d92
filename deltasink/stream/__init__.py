"""The stream side: a micro-batch's origin (its query, batch id and source positions),
the rule that places it at a version, what a writer's versions recorded, the stream
writer behind ``DeltaSink.foreach_batch``, and where a new query resumes."""
