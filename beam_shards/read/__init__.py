"""Reading a published cache: Arrow random access, the decoded training view, and the sampler."""
