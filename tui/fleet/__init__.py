"""The single writer of host state: the live fleet, the static and replay fleets, the recorder."""
