import sqlite3
import unittest

from db.migrate import apply_migrations


def columns(db, table):
    return {row[1]: row for row in db.execute(f"PRAGMA table_info({table})")}


class MigrationTests(unittest.TestCase):
    def setUp(self):
        self.db = sqlite3.connect(":memory:")
        self.addCleanup(self.db.close)

    def test_creates_tasks_table(self):
        applied = apply_migrations(self.db)
        self.assertEqual(applied[0], "0001_create_tasks")
        self.assertLessEqual({"id", "title", "done"}, set(columns(self.db, "tasks")))

    def test_second_run_applies_nothing(self):
        apply_migrations(self.db)
        self.assertEqual(apply_migrations(self.db), [])

    def test_rejects_blank_titles(self):
        apply_migrations(self.db)
        with self.assertRaises(sqlite3.IntegrityError):
            self.db.execute("INSERT INTO tasks (title) VALUES ('  ')")


if __name__ == "__main__":
    unittest.main()
