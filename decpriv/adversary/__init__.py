"""The adversary: who is corrupt, what it records (Recorder -> Transcript) and all it may use (View)."""
