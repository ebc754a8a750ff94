"""Task handlers. Each takes an open sqlite3 connection (see db/migrate.py)."""

COLUMNS = "id, title, done"


def _task(row):
    """Turn a row of COLUMNS into the task dict the API returns."""
    return {"id": row[0], "title": row[1], "done": bool(row[2])}


def get_task(db, task_id):
    row = db.execute(f"SELECT {COLUMNS} FROM tasks WHERE id = ?", (task_id,)).fetchone()
    if row is None:
        raise KeyError(f"no task {task_id}")
    return _task(row)


def list_tasks(db):
    rows = db.execute(f"SELECT {COLUMNS} FROM tasks ORDER BY id").fetchall()
    return [_task(row) for row in rows]


def create_task(db, title):
    title = title.strip()
    if not title:
        raise ValueError("title must not be empty")
    cur = db.execute("INSERT INTO tasks (title) VALUES (?)", (title,))
    db.commit()
    return get_task(db, cur.lastrowid)


def complete_task(db, task_id):
    get_task(db, task_id)  # raises KeyError for an unknown task
    db.execute("UPDATE tasks SET done = 1 WHERE id = ?", (task_id,))
    db.commit()
    return get_task(db, task_id)
