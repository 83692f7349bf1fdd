"""Scenarios whose truth is what they injected.

A case is a simulated node built from one or two root causes (some of which
produce each other's signals), confounders (things that look like a cause but
are not) and noise, on any board, at any load a cause can exist at, for any
tenant shape and host shape. What the diagnosis must find follows from the
injected causes alone: the generator knows the physics of each cause (what it
does to NVML's readings and the kernel's files) and draws its magnitudes
clearly inside it, or, for a confounder, clearly outside any cause; it never
reads the diagnosis' thresholds or rules (``tests/scenario_generator/test_scenario_generator.py``
holds the composing modules to that).

    python -m scenario_generator --cases 2000 --seed 1

runs every case on the real exporter and prints recall, false findings per
case, owner accuracy and the per-class tables. Outside the runtime wheel: a
tool for the diagnosis' developers.
"""
