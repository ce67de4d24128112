"""The Apache Beam transforms: the sink, the source and their counters."""
