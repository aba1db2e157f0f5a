"""turnout: federated-learning simulation under realistic client participation."""

__version__ = "0.1.0"
