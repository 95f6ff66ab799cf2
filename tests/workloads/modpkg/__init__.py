"""A package run as `python -m modpkg.train`: relative imports, its own flags."""
