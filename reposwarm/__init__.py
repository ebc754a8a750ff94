"""reposwarm: a swarm of coding agents making one change in a large repository, durably, on Temporal."""
