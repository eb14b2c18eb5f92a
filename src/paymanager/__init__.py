"""paymanager: payment orchestration on a durable PostgreSQL job engine and a double-entry ledger."""

__version__ = "0.1.0"
