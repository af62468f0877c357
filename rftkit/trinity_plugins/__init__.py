"""Trinity-RFT plugins of the project: `resumable_bots.py`, the BOTS selector that keeps its posteriors
across a restart. The launcher points TRINITY_PLUGIN_DIRS at this folder so that Trinity's actors load it."""
