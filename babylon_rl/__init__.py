"""babylon-rl: turn the logged play of Babylon's LLM trading agents into RL training runs."""

__version__ = "0.1.0"
