"""What a reviewer reads: the review package and the Web UI's summary and details."""
