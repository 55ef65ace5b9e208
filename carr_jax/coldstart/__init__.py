"""Cold-start SFT: multi-turn trajectories as examples, and the SFT step."""
