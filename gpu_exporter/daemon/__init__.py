"""What runs: the exporter assembled from its stages (``exporter``), the poll
loop (``poller``) in the stages' order (``pipeline``), and the process's own
logging and memory settings (``logs``, ``malloc``)."""
