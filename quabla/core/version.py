"""The version of Quabla, in the core so that ``lowering`` keys its compile cache by it
without importing the user-facing package."""

__version__ = "0.2.0.dev0"
