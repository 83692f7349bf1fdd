"""Diagnosis: the symptom -> cause table as data, evaluated every poll."""
