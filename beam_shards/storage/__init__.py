"""Where bytes live: file access for local paths and object stores, store-specific calls, the disk cache and checksums."""
