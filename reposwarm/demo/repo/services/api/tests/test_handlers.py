import unittest

from db.migrate import connect

from services.api.taskboard_api import complete_task, create_task, get_task, list_tasks


class HandlerTests(unittest.TestCase):
    def setUp(self):
        self.db = connect(":memory:")
        self.addCleanup(self.db.close)

    def test_create_and_get(self):
        task = create_task(self.db, "  Write the README ")
        self.assertEqual(task["title"], "Write the README")
        self.assertFalse(task["done"])
        self.assertEqual(get_task(self.db, task["id"])["title"], "Write the README")

    def test_list_is_ordered_by_id(self):
        for title in ("first", "second", "third"):
            create_task(self.db, title)
        self.assertEqual([t["title"] for t in list_tasks(self.db)], ["first", "second", "third"])

    def test_blank_title_is_rejected(self):
        with self.assertRaises(ValueError):
            create_task(self.db, "   ")
        self.assertEqual(list_tasks(self.db), [])

    def test_complete_task(self):
        task = create_task(self.db, "Ship it")
        self.assertTrue(complete_task(self.db, task["id"])["done"])
        with self.assertRaises(KeyError):
            complete_task(self.db, 999)


if __name__ == "__main__":
    unittest.main()
