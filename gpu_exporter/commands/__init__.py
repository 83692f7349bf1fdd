"""The one-shot commands: ``gpu-exporter diagnose``, ``baseline``, ``record``
(and the replay of what it wrote) and ``fleet``. Each runs the exporter once,
on this node or on a simulated one (``one_shot``), and reports; the daemon
never loads them."""
