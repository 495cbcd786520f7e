"""The reconciler: what waits for a later run gets it, and the check that shows what still waits."""
