"""What the user gives: the settings model (``config``), the diagnosis
thresholds (``thresholds``), their value types (``config_types``) and groups
(``sections``), and every file read within bounds (``safefile``,
``safeyaml``)."""
