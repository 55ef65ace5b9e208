"""Tests of the CPU laboratory (lab/): the synthetic worlds, the scripted expert, the probes, the
lab scripts and configs, and the product tests that run on a lab world or config."""
