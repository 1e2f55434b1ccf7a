"""The Concepts, Tags, Problems and Buckets tabs, and the actions on a concept (rename, repeats, add, remove)."""
