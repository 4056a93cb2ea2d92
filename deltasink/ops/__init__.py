"""What an operator reads: the staging table's layout, the commit ledger, where a version
came from (and a streaming checkpoint's positions), and a writer's status."""
