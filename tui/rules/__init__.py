"""Pure rules: the doctor, the danger clock, the teardown gate, the room's watch.

No I/O beyond reading profiles; nothing here loads the SSH layer or starts a process.
"""
