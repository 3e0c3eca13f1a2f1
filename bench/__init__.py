"""Benchmarks and the synthetic model writer (bench/synth.py)."""
