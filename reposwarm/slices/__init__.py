"""A lane's slice of the repository: the path policy and the exact slice decisions."""
