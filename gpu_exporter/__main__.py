"""``python -m gpu_exporter`` is the same as the ``gpu-exporter`` console script."""

from gpu_exporter.cli import main

raise SystemExit(main())
