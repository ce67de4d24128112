"""The package version, in a leaf module so that the manifest writer need not import the package face."""

__version__ = "0.2.0"
