"""Git: commands, branches, remotes, forges, worktree clean-up (one room for everything git)."""
