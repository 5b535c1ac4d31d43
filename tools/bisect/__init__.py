"""Bisecting a package version (two uv environments) or the git history (detached worktrees)."""
