"""PSP drivers: one port (`port.PspDriver`), one module per dialect, `drivers.build_driver` by name."""
