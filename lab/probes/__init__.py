"""Probes of a policy on the laboratory's worlds (`python -m lab.probes.NAME --help`)."""
