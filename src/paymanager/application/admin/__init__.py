"""Admin operations shared by the admin API, the dashboard and the CLI (every change audited)."""
