"""The cache format: every file name a cache holds (layout), one version's manifest, and reading the versions a cache keeps."""
