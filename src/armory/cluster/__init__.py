"""``armory cluster``: one engine per replica under Ray Serve, robots placed by a front
door (docs/scale-out.md)."""
