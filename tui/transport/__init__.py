"""The only code that reaches a box: the SSH link, OpenSSH's SFTP, the helper, the pull engine."""
