"""Apply the SQL files in db/migrations/ to a sqlite3 connection, in filename order.

Usage: python3 db/migrate.py [taskboard.db]
"""

import sqlite3
import sys
from pathlib import Path

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def apply_migrations(db, migrations_dir=MIGRATIONS_DIR):
    """Apply every migration not applied yet; return the names applied now."""
    db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY)")
    done = {name for (name,) in db.execute("SELECT name FROM schema_migrations")}
    applied = []
    for path in sorted(Path(migrations_dir).glob("*.sql")):
        if path.stem in done:
            continue
        db.executescript(path.read_text(encoding="utf-8"))
        db.execute("INSERT INTO schema_migrations (name) VALUES (?)", (path.stem,))
        db.commit()
        applied.append(path.stem)
    return applied


def connect(path=":memory:"):
    """Open a database and bring its schema up to date."""
    db = sqlite3.connect(path)
    apply_migrations(db)
    return db


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "taskboard.db"
    names = apply_migrations(sqlite3.connect(target))
    print(f"{target}: applied {len(names)} migration(s) {names}")
