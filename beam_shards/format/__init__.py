"""The cache format: every file name a cache holds (layout), one version's manifest (a header naming
its shard tables, and its statistics), and reading the versions a cache keeps."""
