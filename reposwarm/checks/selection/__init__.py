"""Which tests a check runs: affected tests, imports, tool selectors, plans, shards, baselines."""
