"""gpurental: a self-hostable GPU rental platform."""

__version__ = "0.1.0"
