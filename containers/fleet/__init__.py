"""The fleet of engines as operators run it: cordon, uncordon, decommission."""
