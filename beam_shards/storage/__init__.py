"""Where bytes live: file access for local paths and object stores (`fs`), what folders hold
(`folders`), store-specific calls, the disk cache and checksums."""
