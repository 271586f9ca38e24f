"""The control room: the Textual app, its key table, screens and messages."""
