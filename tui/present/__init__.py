"""Pure view models: snapshot + host state -> the rows and text each pane shows."""
