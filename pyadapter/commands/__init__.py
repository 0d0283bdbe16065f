"""One module per CLI verb; see pyadapter.cli for the interface each module provides."""
