"""gpurental: a self-hostable GPU rental platform."""

__version__ = "0.4.0"
