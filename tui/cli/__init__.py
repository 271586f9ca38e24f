"""Headless verbs: `gpuroom status|probe|hosts|queue|doctor|pull|gate|record|replay`."""
